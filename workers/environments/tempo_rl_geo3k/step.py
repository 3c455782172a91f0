"""Geo3K's step in Python: the calc_score protocol of lib/env/geo3k.ts and lib/env/tool-call.ts, the
same results and feedback, graded by math-verify (grade.py). A pure function of the turn's text."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from .grade import grade

CALC_SCORE = "calc_score"
CALC_SCORE_USAGE = (
    f"The only tool is {CALC_SCORE}; call it as "
    f'<tool_call>{{"name": "{CALC_SCORE}", "arguments": {{"answer": "your answer"}}}}</tool_call>.'
)
OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass
class StepResult:
    done: bool
    score: int | None
    final_answer: str | None
    observation: str | None
    reason: str
    tool_error: str | None = None


def last_tool_call_body(text: str) -> str | None:
    at = text.rfind(OPEN)
    if at < 0:
        return None
    rest = text[at + len(OPEN) :]
    end = rest.find(CLOSE)
    return (rest if end < 0 else rest[:end]).strip()


def parse_tool_call(body: str) -> tuple[str | None, str | None, str | None]:
    """(name, answer, error) of one call body; never raises."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError as err:
        return None, None, f"invalid JSON in tool call: {err}"
    if not isinstance(call, dict):
        return None, None, "tool call is not a JSON object"
    if isinstance(call.get("function"), dict):
        call = call["function"]
    name = call.get("name") if isinstance(call.get("name"), str) and call.get("name") else None
    if name is None:
        return None, None, 'tool call has no "name"'
    args = call.get("arguments", call.get("parameters"))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as err:
            return name, None, f"invalid JSON in tool call arguments: {err}"
    if not isinstance(args, dict):
        return name, None, 'tool call "arguments" is not an object'
    answer = args.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, (int, float, str)):
        answer = None
    elif isinstance(answer, (int, float)):
        answer = _number_text(answer)
    elif answer.strip() == "":
        answer = None
    else:
        answer = answer.strip()
    if answer is None:
        return name, None, 'tool call has no "answer" argument'
    return name, answer, None


def _number_text(x: float) -> str | None:
    if not math.isfinite(x):
        return None
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def extract_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (braces balanced), or None."""
    at = text.rfind("\\boxed{")
    if at < 0:
        return None
    depth, start = 0, at + len("\\boxed{")
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            if depth == 0:
                return text[start:i]
            depth -= 1
    return None


def final_answer_of(text: str) -> str | None:
    boxed = extract_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    return lines[-1] if lines else None


def feedback(message: str, next_is_last: bool) -> str:
    if not next_is_last:
        return f"{message} Please try again."
    return f"{message} This is your last chance: think it through and give your final answer as \\boxed{{answer}}."


def _ended(text: str, label: str, reason: str, tool_error: str | None = None) -> StepResult:
    final = final_answer_of(text)
    score = 0 if final is None else grade(final, label)
    return StepResult(True, score, final, None, reason, tool_error)


def geo3k_step(text: str, label: str, turn: int, max_turns: int) -> StepResult:
    if not label.strip():
        raise ValueError(f"geo3k step: label is empty (got {label!r})")
    if turn < 1 or turn > max_turns:
        raise ValueError(f"geo3k step: turn {turn} is outside 1..{max_turns}")
    out_of_turns = turn >= max_turns
    next_is_last = turn + 1 >= max_turns
    body = last_tool_call_body(text)
    if body is None:
        return _ended(text, label, "no_tool_call")
    name, answer, error = parse_tool_call(body)
    if name is not None and name != CALC_SCORE:
        error = f"unknown tool {json.dumps(name)}"
    if error is not None:
        if out_of_turns:
            return _ended(text, label, "tool_error_out_of_turns", error)
        return StepResult(
            False, None, None, feedback(f"Tool error: {error}. {CALC_SCORE_USAGE}", next_is_last), "tool_error", error
        )
    assert answer is not None
    if grade(answer, label) == 1:
        return StepResult(True, 1, answer, None, "correct")
    if out_of_turns:
        return StepResult(True, 0, answer, None, "out_of_turns")
    return StepResult(
        False,
        0,
        None,
        feedback(f"calc_score: the answer {answer} is incorrect.", next_is_last),
        "last_chance" if next_is_last else "wrong",
    )
