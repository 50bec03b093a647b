"""Ladder forms: explicit sizes, ratio, arithmetic and observed-size ladders, and their errors."""

from __future__ import annotations

import pytest

from aot.buckets import ladder
from aot.errors import ModelError


@pytest.mark.parametrize("text, sizes", [
    ("1,2,4,8", (1, 2, 4, 8)),
    ("8,1,4,4", (1, 4, 8)),                      # sorted, deduplicated
    ("ratio:128:1.0,0.8,0.6", (77, 103, 128)),   # 0.6*128 = 76.8 rounds up
    ("ratio:100:0.5", (50,)),
    ("linear:192:4", (48, 96, 144, 192)),
    ("linear:10:3", (4, 7, 10)),                 # 10/3 and 20/3 round up
])
def test_ladder_forms(text, sizes):
    assert ladder.parse(text) == sizes


def test_observed_sizes_give_the_maximum_or_a_ratio_of_it(tmp_path):
    observed = tmp_path / "lengths.txt"
    observed.write_text("17\n93, 40\n120\n")
    assert ladder.parse(f"@{observed}") == (120,)
    assert ladder.parse(f"@{observed}*0.8") == (96,)
    assert ladder.parse(f"ratio:@{observed}:1.0,0.5") == (60, 120)
    assert ladder.parse(f"linear:@{observed}*0.5:2") == (30, 60)


@pytest.mark.parametrize("text", ["", "0,1", "a,b", "ratio:128", "ratio:x:1.0", "linear:64:0", "linear:64:z",
                                  "@/nonexistent/sizes.txt", "ratio:128:-0.5"])
def test_a_bad_ladder_names_the_flag_and_the_forms(text):
    with pytest.raises(ModelError, match="bad --dim S") as e:
        ladder.parse(text, "--dim S")
    assert "ratio:MAX" in e.value.hint


def test_an_empty_observed_file_is_an_error(tmp_path):
    (tmp_path / "none.txt").write_text("\n")
    with pytest.raises(ModelError, match="lists no sizes"):
        ladder.parse(f"@{tmp_path / 'none.txt'}")
