"""The one reader of dim declarations (`check --dim`, `upload --dim`, the `dims` form field)."""

from __future__ import annotations

import pytest

from validator.dims import MAX_DECLARATIONS, DimSyntaxError, parse_dim_declarations


def test_options_and_comma_separated_lists_are_one_mapping() -> None:
    assert parse_dim_declarations(["D1=128", " D2 = 64 , audio.1=8"]) == {
        "D1": 128,
        "D2": 64,
        "audio.1": 8,
    }
    assert parse_dim_declarations([]) == {}


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        (["D1"], "expected NAME=SIZE[,NAME=SIZE...] (SIZE a whole number), got 'D1'"),
        (["=5"], "got '=5'"),
        (["D1=x"], "got 'D1=x'"),
        (["D1=1.5"], "got 'D1=1.5'"),
        (["D1=٣"], "got 'D1=٣'"),  # a digit, but not an ASCII one
        (["my dim=3"], "got 'my dim=3'"),
        (["D1=2,"], "got ''"),
        (["D1=2", "D1=3"], "expected each NAME once, got 'D1' twice"),
        ([",".join(f"D{i}=1" for i in range(MAX_DECLARATIONS + 1))], "expected at most 64"),
    ],
)
def test_anything_else_says_what_was_expected(texts: list[str], message: str) -> None:
    with pytest.raises(DimSyntaxError) as info:
        parse_dim_declarations(texts)
    assert message in str(info.value)
