"""The trainer's pydantic models (workers/trainer/contract.py) against the zod payloads the workflow sends
(lib/contract.ts), field by field: names, required-ness, types and enums, numeric and length bounds, and
defaults where both sides have one. The zod side is read from its JSON Schema export,
tests/fixtures/trainer-contract-schema.json (written by `node --import tsx config/contract-schema.ts`;
tests/ts/contract-schema.test.ts fails when it is stale).

Required-ness is compared one way: a field the trainer requires must be one the workflow's type requires
(else a payload zod accepts is refused), while the trainer may default a field the workflow always sends:
its own tests and benches give a few fields."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from trainer import contract

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "trainer-contract-schema.json"
REGENERATE = "node --import tsx config/contract-schema.ts"
# config/contract-schema.ts TRAINER_PAYLOADS: the zod schemas, by the name of the pydantic model here.
PAYLOADS = ("SyncWeightsInput", "TrainStepInput")
# zod writes every integer's safe range as its bounds; pydantic writes none.
SAFE_INTEGER = 2**53 - 1
COMPARED = (
    "type",
    "enum",
    "nullable",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
)
MISSING = "absent"


def zod_schemas() -> dict:
    return json.loads(SCHEMA_FILE.read_text())


def _resolve(node: dict, defs: dict) -> dict:
    """A node with its $ref (pydantic's shared models) replaced by the definition, its own keys kept."""
    if "$ref" not in node:
        return node
    target = defs[node["$ref"].rsplit("/", 1)[-1]]
    return {**_resolve(target, defs), **{k: v for k, v in node.items() if k != "$ref"}}


def _alternatives(node: dict) -> dict:
    """Alternatives in one form: literals as an enum (zod writes a union of z.literal as anyOf of consts,
    pydantic a Literal as enum or const), null as nullable (zod writes a type list, pydantic anyOf)."""
    if isinstance(node.get("type"), list):
        types = [t for t in node["type"] if t != "null"]
        node = {**node, "type": types[0] if len(types) == 1 else types, "nullable": "null" in node["type"]}
    if "const" in node:
        node = {**{k: v for k, v in node.items() if k != "const"}, "enum": [node["const"]]}
    members = node.get("anyOf")
    if members is None:
        return node
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    others = [m for m in members if m.get("type") != "null"]
    if len(others) < len(members):
        rest["nullable"] = True
    if others and all("const" in m or "enum" in m for m in others):
        rest["enum"] = [v for m in others for v in (m["enum"] if "enum" in m else [m["const"]])]
        return rest
    if len(others) == 1:
        return {**others[0], **rest}
    rest["anyOf"] = others
    return rest


def _bounds(node: dict) -> dict:
    """Bounds in one form: an integer's exclusive bound as the inclusive one (> 0 is ≥ 1), zod's safe
    integer range dropped, a literal's type left to its enum (zod calls 1 | 2 numbers, pydantic integers)."""
    node = dict(node)
    if "enum" in node:
        node.pop("type", None)
    if node.get("type") == "integer":
        if "exclusiveMinimum" in node:
            node["minimum"] = node.pop("exclusiveMinimum") + 1
        if "exclusiveMaximum" in node:
            node["maximum"] = node.pop("exclusiveMaximum") - 1
        if node.get("minimum") == -SAFE_INTEGER:
            del node["minimum"]
        if node.get("maximum") == SAFE_INTEGER:
            del node["maximum"]
    return node


def flatten(schema: dict, defs: dict | None = None, prefix: str = "") -> dict[str, dict]:
    """Every field of a payload by its dotted path (array items as `name[]`), each described by the
    compared keywords, `required`, `strict` (objects that refuse unknown keys) and `default`."""
    defs = schema.get("$defs", {}) if defs is None else defs
    out: dict[str, dict] = {}
    required = set(schema.get("required", []))
    for name, raw in schema.get("properties", {}).items():
        node = _bounds(_alternatives(_resolve(raw, defs)))
        path = f"{prefix}{name}"
        field = {k: node[k] for k in COMPARED if k in node}
        field["required"] = name in required
        if "default" in node and not isinstance(node["default"], dict):
            field["default"] = node["default"]
        if "anyOf" in node:
            field["anyOf"] = node["anyOf"]
        out[path] = field
        items = _bounds(_alternatives(_resolve(node.get("items", {}), defs)))
        if node.get("type") == "object" and "properties" in node:
            field["strict"] = node.get("additionalProperties") is False
            out.update(flatten(node, defs, f"{path}."))
        elif items.get("type") == "object" and "properties" in items:
            out[f"{path}[]"] = {"strict": items.get("additionalProperties") is False}
            out.update(flatten(items, defs, f"{path}[]."))
        elif items:
            out[f"{path}[]"] = {k: items[k] for k in (*COMPARED, "anyOf") if k in items}
    return out


def _same(a: object, b: object) -> bool:
    """Equal as JSON values: pydantic writes a float field's default 0 as 0.0 where zod writes 0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return a == b


def mismatches(payload: str, zod: dict, pydantic: dict) -> list[str]:
    """One line per difference, naming the field and both sides' values."""
    z, p = flatten(zod), flatten(pydantic)
    out = [f"{payload}.{path}: only in the zod schema" for path in z.keys() - p.keys()]
    out += [f"{payload}.{path}: only in the pydantic model" for path in p.keys() - z.keys()]
    for path in sorted(z.keys() & p.keys()):
        zf, pf = z[path], p[path]
        if pf.get("required") and not zf.get("required"):
            out.append(f"{payload}.{path}: required by pydantic, optional in zod (a payload zod accepts is refused)")
        for key in (*COMPARED, "anyOf", "strict"):
            zv, pv = zf.get(key, MISSING), pf.get(key, MISSING)
            if key == "enum" and MISSING not in (zv, pv):
                zv, pv = sorted(zv, key=json.dumps), sorted(pv, key=json.dumps)
            if not _same(zv, pv):
                out.append(f"{payload}.{path} {key}: zod {zv!r}, pydantic {pv!r}")
        if "default" in zf and "default" in pf and not _same(zf["default"], pf["default"]):
            out.append(f"{payload}.{path} default: zod {zf['default']!r}, pydantic {pf['default']!r}")
    return sorted(out)


def test_the_schema_file_names_every_payload_the_trainer_receives():
    assert tuple(sorted(zod_schemas())) == PAYLOADS, f"stale? run {REGENERATE}"


@pytest.mark.parametrize("payload", PAYLOADS)
def test_the_pydantic_model_is_the_zod_schema_field_by_field(payload):
    model = getattr(contract, payload)
    found = mismatches(payload, zod_schemas()[payload], model.model_json_schema())
    assert found == [], "\n".join(
        [
            f"workers/trainer/contract.py {payload} differs from lib/contract.ts:",
            *found,
            f"(after a zod change: {REGENERATE})",
        ]
    )


def test_a_difference_is_named_with_both_values():
    zod = zod_schemas()["TrainStepInput"]
    pydantic = contract.TrainStepInput.model_json_schema()
    changed = copy.deepcopy(zod)
    hyper = changed["properties"]["hyper"]["properties"]
    hyper["lr"]["default"] = 1e-5
    hyper["micro_batch_tokens"]["maximum"] = 4096
    hyper["loss_agg"]["enum"].append("seq_mean")
    hyper["dr_grpo"]["type"] = "string"
    del changed["properties"]["data_cursor"]["additionalProperties"]
    del hyper["tis"]["properties"]["mode"]
    changed["properties"]["extra"] = {"type": "string"}
    changed["required"].remove("run_id")
    assert mismatches("TrainStepInput", changed, pydantic) == [
        "TrainStepInput.data_cursor strict: zod False, pydantic True",
        "TrainStepInput.extra: only in the zod schema",
        "TrainStepInput.hyper.dr_grpo type: zod 'string', pydantic 'boolean'",
        "TrainStepInput.hyper.loss_agg enum: zod ['sample_mean', 'seq_mean', 'token_mean'], pydantic ['sample_mean', 'token_mean']",
        "TrainStepInput.hyper.lr default: zod 1e-05, pydantic 1e-06",
        "TrainStepInput.hyper.micro_batch_tokens maximum: zod 4096, pydantic 16777216",
        "TrainStepInput.hyper.tis.mode: only in the pydantic model",
        "TrainStepInput.run_id: required by pydantic, optional in zod (a payload zod accepts is refused)",
    ]
