"""`python -m tempo_rl_geo3k`: reads one JSON case a line ({text, label, turn, max_turns}) on stdin and
writes the Python step's result for each, one JSON line (tests/ts/byo-geo3k.test.ts compares them
with the TypeScript step's). `--grade`: lines {answer, label} → {reward} (math-verify)."""

import json
import logging
import sys
from dataclasses import asdict

from .grade import grade
from .step import geo3k_step

logging.getLogger("math_verify").setLevel(logging.ERROR)
for line in sys.stdin:
    case = json.loads(line)
    if "--grade" in sys.argv:
        out = {"reward": grade(case["answer"], case["label"])}
    else:
        out = asdict(geo3k_step(case["text"], case["label"], case["turn"], case["max_turns"]))
    print(json.dumps(out), flush=True)
