"""The real-world corpus: architectures from the Paddle ecosystem packages' own code (see zoo.py),
saved by Paddle 3.3.1 as legacy programs and as PIR programs, must give Paddle's answers.

Each model runs at batch 1 and 2 against Paddle's Executor on its legacy program: within
rtol 1e-4 / atol 1e-5, or, for the models in compare.FLOAT64_JUDGED, against a float64 run of
the same program (compare.in_float64): graphgate's distance from it must be at most 2x Paddle's
own float32 distance. The PIR program (same seed, same weights) is checked against the same Paddle
answers.

By default (the CI run) only REPRESENTATIVE runs: one or two models per category, a few minutes
on 2 cores once exported (exports are cached under tests/.cache/ecosystem/ by a hash of the
package versions and the build code). GRAPHGATE_CORPUS=full runs every model (`-m corpus`
selects the corpus alone).
"""

from __future__ import annotations

import os
from typing import Final

import pytest

pytest.importorskip("paddle")

from tests.corpus import compare, zoo

pytestmark = [pytest.mark.paddle, pytest.mark.corpus]

# One or two per category; the default run.
REPRESENTATIVE: Final = (
    "pplcnet_x0_25",  # classification, CNN
    "pvt_v2_b0",  # classification, vision transformer
    "pp_liteseg_stdc1",  # segmentation
    "ocr_det_db_mobilenetv3",  # OCR detection
    "ocr_rec_crnn_mobilenetv3",  # OCR recognition (CTC, LSTM)
    "ocr_cls_mobilenetv3",  # OCR angle classification
    "yolov3_mobilenet_v1_nms",  # detection: yolo_box + multiclass_nms3
    "bert",  # NLP encoder
    "gpt",  # GPT-style decoder (causal mask)
    "conformer_encoder",  # speech encoder
    "deepspeech2_online",  # streaming ASR: RNN state inputs [-1, -1, -1] really [3, B, 64]
    "rnn_initial_states",  # paddle.nn.LSTM / GRU fed h0, c0
    "kv_cache_decoder",  # a decoder step fed its key/value cache of dynamic length
)

# Models graphgate refuses today: name -> the codes expected (ops still missing, see
# docs/handover/corpus-findings-11c.md). They xfail with graphgate's message and fail once accepted (remove them then).
KNOWN_REJECTIONS: Final[dict[str, frozenset[str]]] = {}
# The same for the PIR programs (PIR reader gaps, see docs/handover/corpus-findings-11c.md).
# (Empty: nn.LSTM's dropout state, a parameter op Paddle marks non-persistable and leaves out
# of .pdiparams, was counted as a parameter until graph_proto/pir.py read the flag.)
KNOWN_PIR_REJECTIONS: Final[dict[str, frozenset[str]]] = {}


def _selected() -> list[str]:
    if os.environ.get("GRAPHGATE_CORPUS") == "full":
        return list(zoo.ENTRIES)
    return list(REPRESENTATIVE)


def _check(name: str, fmt: str) -> None:
    legacy = compare.files_of(name, "legacy")
    assert not isinstance(legacy, str), f"{name}: Paddle could not export it: {legacy}"
    files = legacy if fmt == "legacy" else compare.files_of(name, fmt)
    if fmt == "pir" and name in compare.PIR_NOT_EXPORTABLE:
        assert isinstance(files, str), (
            f"{name} exports as PIR now: remove it from compare.PIR_NOT_EXPORTABLE"
        )
        pytest.xfail(f"{compare.PIR_NOT_EXPORTABLE[name]}: {files.splitlines()[-1][:200]}")
    assert not isinstance(files, str), f"{name}: Paddle could not export it as {fmt}: {files}"
    result = compare.verdict(name, files, name in compare.FLOAT64_JUDGED, reference=legacy)
    known = (KNOWN_REJECTIONS if fmt == "legacy" else KNOWN_PIR_REJECTIONS).get(name)
    if known is not None:
        assert result.status == "REJECTED", (
            f"{name} ({fmt}) is accepted now: remove it from the known rejections"
        )
        assert set(result.codes) <= known, result.line()
        pytest.xfail(result.line())
    assert result.status == "PASS", f"{name} ({fmt}): {result.line()}"


@pytest.mark.parametrize("name", _selected())
def test_legacy_program_gives_paddles_answers(name: str) -> None:
    _check(name, "legacy")


@pytest.mark.parametrize("name", _selected())
def test_pir_program_gives_paddles_answers(name: str) -> None:
    _check(name, "pir")


def test_every_category_is_represented() -> None:
    categories = {zoo.ENTRIES[name].category for name in REPRESENTATIVE}
    every = {entry.category for entry in zoo.ENTRIES.values()}
    # PP-YOLOE+ without post-processing is its NMS twin's network: the full run has it.
    assert every - categories <= {"detection"}, (
        f"missing from the default run: {every - categories}"
    )
    assert every >= {
        "classification", "segmentation", "detection", "detection (NMS)", "ocr detection",
        "ocr recognition (CTC)", "ocr angle classification", "nlp encoder",
        "nlp decoder (GPT)", "speech encoder", "speech streaming (state inputs)",
        "rnn (initial-state inputs)", "nlp decoder (KV cache)",
    }  # fmt: skip
    assert len(zoo.ENTRIES) >= 50, f"expected at least 50 programs, got {len(zoo.ENTRIES)}"
