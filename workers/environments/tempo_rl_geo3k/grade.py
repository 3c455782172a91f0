"""The Python side's math reward: math-verify (https://github.com/huggingface/Math-Verify), parsing
both sides as LaTeX or a plain expression and comparing them symbolically. tests/ts/reward-math-verify.test.ts
compares it with the exact math RM of lib/math on that RM's own table of cases."""

from __future__ import annotations

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

_CONFIG = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())


def _parsed(text: str):
    text = text.strip()
    # A bare answer (no $…$, no \boxed{}) is read as LaTeX math: wrap it so the LaTeX extractor sees it.
    wrapped = text if ("$" in text or "\\boxed" in text) else f"${text}$"
    return parse(wrapped, extraction_config=_CONFIG, parsing_timeout=None) or parse(text, extraction_config=_CONFIG, parsing_timeout=None)


def grade(answer: str, label: str) -> int:
    """1 when math-verify finds `answer` equal to `label`, else 0; never raises."""
    try:
        gold, pred = _parsed(label), _parsed(answer)
        if not gold or not pred:
            return 0
        return 1 if verify(gold, pred, timeout_seconds=None) else 0
    except Exception:  # noqa: BLE001 - a grader never fails an episode on the model's text
        return 0
