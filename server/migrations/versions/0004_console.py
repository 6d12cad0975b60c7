"""The console's sessions: only the sha256 of each session id is stored."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("operator", sa.String(64), nullable=False, index=True),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("read_only", sa.Boolean(), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.Column("ended", sa.DateTime(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("console_sessions")
