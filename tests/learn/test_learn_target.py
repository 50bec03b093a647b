"""``make learn-host``: the models it collects and times are real zoo and corpus models, and never
one of the corpus's held-out validation pair (no cost-model setting may be chosen by looking at
them, aot/models/corpus.py)."""

from __future__ import annotations

import re
from pathlib import Path

from aot.models import corpus, zoo

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


def _learn_models() -> list[str]:
    text = MAKEFILE.read_text().replace("\\\n", " ")
    found = re.search(r"^LEARN_MODELS \?=(.*)$", text, re.MULTILINE)
    assert found, "the Makefile defines LEARN_MODELS"
    return found.group(1).split()


def test_learn_host_collects_development_models_only_and_times_three_rounds():
    names = _learn_models()
    zoo_names = {m.name for m in zoo.MODELS}
    development, held_out = {m.name for m in corpus.development()}, {m.name for m in corpus.validation()}
    assert len(names) == len(set(names)) >= 12
    known = {"zoo": zoo_names, "corpus": development}
    for name in names:
        kind, _, model = name.partition(":")
        assert model not in held_out, f"{name} is a validation model"
        assert kind in known and model in known[kind], f"{name} is no zoo or development corpus model"
    assert {f"zoo:{n}" for n in zoo_names} <= set(names)   # the whole zoo
    retime = next(line for line in MAKEFILE.read_text().splitlines() if "learn retime" in line and "LEARN_MODELS" in line)
    assert "--rounds 3" in retime   # the labels the shipped host model is trained on
