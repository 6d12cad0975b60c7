"""Artifact reference counts and sizes (garbage collection, storage quotas).

Existing versions' artifacts are counted here; their sizes are not known to the database, so
they start at 0 and `ArtifactRefs.sweep` fills them in from the store at the next start.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    op.create_table(
        "artifact_refs",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("refs", sa.Integer(), nullable=False),
    )
    op.execute(
        """
        INSERT INTO artifact_refs (sha256, size_bytes, refs)
        SELECT sha, 0, COUNT(*) FROM (
            SELECT program_sha256 AS sha FROM model_versions
            UNION ALL SELECT params_sha256 FROM model_versions WHERE params_sha256 IS NOT NULL
            UNION ALL SELECT onnx_sha256 FROM model_versions
        ) AS named GROUP BY sha
        """
    )


def downgrade() -> None:
    op.drop_table("artifact_refs")
