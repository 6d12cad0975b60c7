"""Human-readable rendering of a validation report for the terminal (rich tables)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rich.console import Console
from rich.table import Table

from validator import Report


def render_report(
    program: Path,
    params: Path | None,
    report: Report,
    provenance: Mapping[str, str] | None = None,
) -> None:
    console = Console(highlight=False)
    console.print(f"[bold green]{program}: valid[/]" + (f" (params {params})" if params else ""))
    if provenance is not None:
        console.print(signed_line(provenance), soft_wrap=True)  # a fingerprint stays whole
    signature = Table(title="Signature", title_justify="left")
    for column in ("", "name", "dtype", "dims"):
        signature.add_column(column)
    for kind, specs in (("input", report.inputs), ("output", report.outputs)):
        for spec in specs:
            signature.add_row(kind, spec.name, spec.dtype.label, str(list(spec.dims)))
    console.print(signature)
    ops = Table(title=f"Ops ({report.op_count})", title_justify="left")
    ops.add_column("op type")
    ops.add_column("count", justify="right")
    for op_type, count in report.op_histogram.items():
        ops.add_row(op_type, str(count))
    console.print(ops)
    console.print(f"Parameters: {report.param_count} tensors, {_bytes(report.param_bytes)}")
    console.print(
        f"Cost at batch {report.batch}: {report.flops_per_sample / 1e9:.3f} GFLOPs per sample, "
        f"peak activations {_bytes(report.peak_activation_bytes_per_sample)} per sample, "
        f"largest tensor {_bytes(report.largest_tensor_bytes)}"
    )
    for warning in report.warnings:
        console.print(f"[yellow]warning[/]: {warning}")


def _bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{count} B"
        size /= 1024
    return f"{count} B"


def signed_line(provenance: Mapping[str, str]) -> str:
    """ "signed by <identity> (certificate, key sha256:...)", or the key alone for a key."""
    fingerprint = provenance["key_fingerprint"]
    if provenance["method"] == "key":
        return f"signed by key {fingerprint}"
    return f"signed by {provenance['signer']} (certificate, key {fingerprint})"
