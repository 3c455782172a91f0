"""The Python side's math reward: math-verify (https://github.com/huggingface/Math-Verify), parsing
both sides as LaTeX or a plain expression and comparing them symbolically. tests/ts/reward-math-verify.test.ts
compares it with the exact math RM of lib/math on that RM's own table of cases."""

from __future__ import annotations

import re

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

TIMEOUT_S = 3
"""Per parse and per comparison (math-verify times out with SIGALRM: main thread only)."""
_CONFIG = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())


# A label is a mathjs expression (13*pi/9, 180*acos(97/111)/pi, Infinity): its names in LaTeX, so
# math-verify's LaTeX parser reads pi as π, not p·i.
_MATHJS_NAMES = [
    (re.compile(r"\b(a(?:sin|cos|tan))\b"), lambda m: "\\arc" + m.group(1)[1:]),
    (re.compile(r"(?<!\\)\b(sin|cos|tan|pi|ln|log)\b"), lambda m: "\\" + m.group(1)),
    (re.compile(r"\bInfinity\b"), lambda m: "\\infty"),
]


def _latex_label(label: str) -> str:
    for pattern, repl in _MATHJS_NAMES:
        label = pattern.sub(repl, label)
    return label


def _parsed(text: str, *, label: bool = False):
    text = _latex_label(text.strip()) if label else text.strip()
    # A bare answer (no $…$, no \boxed{}) is read as LaTeX math: wrap it so the LaTeX extractor sees it.
    wrapped = text if ("$" in text or "\\boxed" in text) else f"${text}$"
    return parse(wrapped, extraction_config=_CONFIG, parsing_timeout=TIMEOUT_S) or parse(
        text, extraction_config=_CONFIG, parsing_timeout=TIMEOUT_S
    )


def grade(answer: str, label: str) -> int:
    """1 when math-verify finds `answer` equal to `label`, else 0; never raises."""
    try:
        gold, pred = _parsed(label, label=True), _parsed(answer)
        if not gold or not pred:
            return 0
        return 1 if verify(gold, pred, timeout_seconds=TIMEOUT_S) else 0
    except Exception:  # noqa: BLE001 - a grader never fails an episode on the model's text
        return 0
