"""Worker crashes per model version, in the database: every replica counts them together, and
a quarantine (model_versions.status "quarantined") survives restarts until an admin releases
it."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.create_table(
        "model_crashes",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "tenant_id",
            sa.String(32),
            sa.ForeignKey("tenants.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("model", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_model_crashes_version", "model_crashes", ["tenant_id", "model", "version"])


def downgrade() -> None:
    op.drop_index("ix_model_crashes_version", table_name="model_crashes")
    op.drop_table("model_crashes")
