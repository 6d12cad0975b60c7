"""Signed uploads: each tenant's signing policy in its own table, each version's provenance."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.create_table(
        "tenant_signing",
        sa.Column(
            "tenant_id",
            sa.String(32),
            sa.ForeignKey("tenants.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("require_signature", sa.Boolean(), nullable=False),
        sa.Column("keys", sa.Text(), nullable=False),
        sa.Column("ca", sa.Text(), nullable=False),
        sa.Column("identities", sa.Text(), nullable=False),
    )
    with op.batch_alter_table("model_versions") as batch:
        batch.add_column(sa.Column("provenance", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("model_versions") as batch:
        batch.drop_column("provenance")
    op.drop_table("tenant_signing")
