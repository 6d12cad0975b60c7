"""The operator's side: named admins, per-tenant rules, the audit log, kept rejections."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("admin", sa.String(64), nullable=True))
    op.create_table(
        "admins",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("revoked", sa.DateTime(), nullable=True),
    )
    op.create_table(
        "tenant_rules",
        sa.Column(
            "tenant_id",
            sa.String(32),
            sa.ForeignKey("tenants.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("quota", sa.Text(), nullable=False),
        sa.Column("suspended", sa.DateTime(), nullable=True),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(), nullable=False, index=True),
        sa.Column("actor", sa.String(80), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=True),
        sa.Column("tenant", sa.String(64), nullable=True, index=True),
        sa.Column("action", sa.String(32), nullable=False, index=True),
        sa.Column("target", sa.String(200), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("client", sa.String(64), nullable=True),
    )
    op.create_table(
        "rejections",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "tenant_id",
            sa.String(32),
            sa.ForeignKey("tenants.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("code", sa.String(64), nullable=False),
        sa.Column("program_sha256", sa.String(64), nullable=False),
        sa.Column("params_sha256", sa.String(64), nullable=True),
        sa.Column("diagnostics", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    for table in ("rejections", "audit_log", "tenant_rules", "admins"):
        op.drop_table(table)
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("admin")
