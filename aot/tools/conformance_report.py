"""docs/conformance.md from the conformance runs' JSON: counts per target, the failures by error
class and by op family (so the work goes where the cases are), and every failing case."""

from __future__ import annotations

import enum
import re
from collections import Counter

CATEGORIES = ("pass", "wrong result", "runtime error", "compile error", "import error", "unsupported")
_NARROW = re.compile(r"float8|e4m3|e5m2|float4|int4|uint4|int2|uint2", re.I)
ON_HOST = "on the host: "   # how a passing case's detail starts when some region ran on the host
_HALF = re.compile(r"fp16|bf16|float16|bfloat16", re.I)


class ErrorClass(enum.Enum):
    """Why a case does not pass, from its status, name and first error line."""

    MISSING_PATTERN = "missing lowering pattern (failed to legalize torch.operator)"
    TORCH_OP = "lowering bug in a torch op (aten.*)"
    CONSTANT = "secondary torch.constant.* symptom"
    LIBM = "missing libm symbol at run time"
    NARROW_TYPE = "narrow types (float8, int4, float4, ...)"
    HALF_TOLERANCE = "fp16/bf16 tolerance"
    WRONG = "wrong result"
    RUNTIME = "runtime error"
    COMPILE_OTHER = "other compile error"
    IMPORT = "import error"
    UNSUPPORTED = "refused by aot (strings, sequences, optionals, training ops, ...)"


def error_class(case: dict) -> ErrorClass:
    status, name, detail = case["status"], case["name"], case.get("detail", "")
    if status == "unsupported":
        return ErrorClass.UNSUPPORTED
    if _NARROW.search(name) or "stream.tensor.sizeof" in detail:
        return ErrorClass.NARROW_TYPE
    if status == "import error":
        return ErrorClass.IMPORT
    if "undefined symbol" in detail:
        return ErrorClass.LIBM
    if status == "wrong result":
        return ErrorClass.HALF_TOLERANCE if _HALF.search(name) else ErrorClass.WRONG
    if status == "runtime error":
        return ErrorClass.RUNTIME
    if "torch.constant" in detail:
        return ErrorClass.CONSTANT
    if "torch.aten" in detail or "aten." in detail:
        return ErrorClass.TORCH_OP
    # Older results cut the message after "failed to legalize operation"; it is the operator one.
    if "torch.operator" in detail or detail.rstrip().endswith("failed to legalize operation"):
        return ErrorClass.MISSING_PATTERN
    return ErrorClass.COMPILE_OTHER


def family(name: str) -> str:
    """The op family of a case, by its name: ``test_attention_3d_causal`` -> ``attention``."""
    words = name.removeprefix("test_").split("_")
    return words[0] if words[0] not in {"rms", "rotary", "affine", "causal", "linear"} else "_".join(words[:2])


def markdown(results: list[dict]) -> str:
    """Summary of one or more targets' results."""
    from importlib.metadata import version

    lines = ["# ONNX node conformance through aot", "",
             f"onnx {version('onnx')}, iree-base-compiler {version('iree-base-compiler')}. "
             "Regenerate with `make conformance` (full) or `aot conformance --target T`.", "",
             "| target | cases | " + " | ".join(CATEGORIES) + " | pass / all | pass / importable |",
             "|---|---|" + "---|" * len(CATEGORIES) + "---|---|"]
    for res in results:
        c = res["counts"]
        importable = res["total"] - c["unsupported"] - c["import error"]
        lines.append(f"| {res['target']} | {res['total']} | " + " | ".join(str(c[k]) for k in CATEGORIES)
                     + f" | {100 * c['pass'] / max(res['total'], 1):.1f}% | {100 * c['pass'] / max(importable, 1):.1f}% |")
    for res in results:
        if res.get("reruns"):
            lines.append(f"\n{res['target']}: the last full run, then these cases re-run and merged "
                         "(`aot conformance --filter F --merge`): " + "; ".join(f"`{r}`" for r in res["reruns"]) + ".")
    for res in results:
        passed = [x for x in res["cases"] if x["status"] == "pass"]
        on_host = sum(1 for x in passed if x.get("detail", "").startswith(ON_HOST))
        if on_host:
            lines.append(f"\n{res['target']}: {len(passed) - on_host} passing cases ran wholly on its device, "
                         f"{on_host} with some regions on the host.")
    for res in results:
        failed = [x for x in res["cases"] if x["status"] != "pass"]
        by_class = Counter(error_class(x) for x in failed)
        lines += ["", f"## Failures on {res['target']} by error class", "", "| error class | cases |", "|---|---|"]
        lines += [f"| {k.value} | {n} |" for k, n in by_class.most_common()]
        totals = Counter(family(x["name"]) for x in res["cases"])
        fails = Counter(family(x["name"]) for x in failed)
        lines += ["", f"## Op families with failures on {res['target']} (largest first)", "",
                  "| family | cases | pass | not passing |", "|---|---|---|---|"]
        lines += [f"| {f} | {totals[f]} | {totals[f] - n} | {n} |" for f, n in fails.most_common() if n]
    for res in results:
        lines += ["", f"## Not passing on {res['target']}", ""]
        for cat in CATEGORIES[1:]:
            failed = [x for x in res["cases"] if x["status"] == cat]
            if failed:
                lines.append(f"### {cat} ({len(failed)})")
                lines += [f"- `{x['name']}`: {x['detail']}".rstrip(": ") for x in failed]
                lines.append("")
    return "\n".join(lines) + "\n"
