"""Weight buckets: the trainer's weights handed to engines on its own host through shared memory.

The trainer casts its weights to the engines' dtype and packs them, in the model's order, into flat
byte buffers of about `engines.ipc_bucket_mb` ("buckets"); each engine worker maps a bucket, copies it
and loads the tensors it holds (extension.py). One handle per bucket rather than one per tensor: with
a handle per tensor, vime's colocated weight sync ran 4.3× slower than slime's bucketed one
(https://github.com/vllm-project/vime/issues/175).

A bucket travels as JSON (vLLM's /collective_rpc route passes JSON):

    {"kind": "cuda_ipc", "handles": {"<GPU UUID>": [...torch's CUDA IPC handle, encoded...]},
     "nbytes": N, "tensors": [[name, dtype, shape, byte offset], ...]}
    {"kind": "shm", "path": "/dev/shm/tempo-rl-weights-…", "nbytes": N, "tensors": [...]}

cuda_ipc: torch's own CUDA IPC (torch.multiprocessing.reductions), with one handle per GPU on which a
trainer rank holds a copy; each engine worker opens its own GPU's (GPUs are named by UUID, because
CUDA_VISIBLE_DEVICES numbers them per process). shm: a file under /dev/shm (memory, not disk), for a
CPU trainer and CPU engines on one host. Nothing is pickled: a handle's bytes travel as base64 and
its types are named from a fixed list."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

# Each tensor starts at a multiple of this (vLLM's kernels read weights through aligned vector loads).
ALIGN = 256
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
SHM_DIR = "/dev/shm"
# How an engine takes an update (tempo_engine/extension.py's tempo_rl_begin_update): the first is a sync's
# default (engines.ipc_load: auto or layerwise; direct only for the bench).
UPDATE_MODES = ("auto", "layerwise", "direct")


class BucketError(RuntimeError):
    """A bucket that this engine cannot open (another host, another GPU, a malformed description)."""


@dataclass(frozen=True)
class Entry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * DTYPES[self.dtype].itemsize

    def to_json(self) -> list:
        return [self.name, self.dtype, list(self.shape), self.offset]


def dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise BucketError(f"dtype {name} cannot travel in a bucket (known: {', '.join(DTYPES)})")
    return name


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan(specs: Iterable[tuple[str, str, tuple[int, ...]]], capacity: int) -> list[list[Entry]]:
    """Consecutive buckets of (name, dtype name, shape) in the given order, each at most `capacity`
    bytes — but a tensor larger than that, which gets a bucket of its own."""
    buckets: list[list[Entry]] = []
    current: list[Entry] = []
    used = 0
    for name, dtype, shape in specs:
        entry = Entry(name, dtype, tuple(shape), 0)
        if current and used + entry.nbytes > capacity:
            buckets.append(current)
            current, used = [], 0
        current.append(Entry(name, dtype, tuple(shape), used))
        used = _aligned(used + entry.nbytes)
    if current:
        buckets.append(current)
    return buckets


def size_of(entries: list[Entry]) -> int:
    last = entries[-1]
    return last.offset + last.nbytes


def views(buf: torch.Tensor, entries: list[Entry]) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of each entry, viewing the flat uint8 `buf` in place."""
    for e in entries:
        yield e.name, buf[e.offset : e.offset + e.nbytes].view(DTYPES[e.dtype]).view(e.shape)


def entries_of(desc: dict) -> list[Entry]:
    try:
        return [Entry(str(n), str(d), tuple(int(x) for x in s), int(o)) for n, d, s, o in desc["tensors"]]
    except (KeyError, TypeError, ValueError) as err:
        raise BucketError(f"malformed bucket description: {err}") from err


# --- CUDA IPC ---------------------------------------------------------------------------------------


def gpu_uuid(device: torch.device) -> str:
    return str(torch.cuda.get_device_properties(device).uuid)


def _type_names() -> dict[str, type]:
    return {"Tensor": torch.Tensor, "TypedStorage": torch.storage.TypedStorage, "UntypedStorage": torch.UntypedStorage}


def _encode(value):
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, type):
        names = {v: k for k, v in _type_names().items()}
        if value not in names:
            raise BucketError(f"cannot share a {value.__name__} through a bucket")
        return {"type": names[value]}
    if isinstance(value, (tuple, list, torch.Size)):
        return {"seq": [_encode(v) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise BucketError(f"unexpected {type(value).__name__} in a CUDA IPC handle")


def _decode(value):
    if isinstance(value, dict):
        if "b64" in value:
            return base64.b64decode(value["b64"])
        if "dtype" in value:
            return getattr(torch, value["dtype"])
        if "type" in value:
            return _type_names()[value["type"]]
        if "seq" in value:
            return tuple(_decode(v) for v in value["seq"])
        raise BucketError(f"unknown field in a CUDA IPC handle: {sorted(value)}")
    return value


def share_cuda(buf: torch.Tensor) -> list:
    """The JSON form of torch's CUDA IPC handle of `buf` (torch.multiprocessing.reductions.reduce_tensor)."""
    from torch.multiprocessing.reductions import reduce_tensor

    _, args = reduce_tensor(buf)
    return [_encode(a) for a in args]


def open_cuda(handle: list, device: torch.device) -> torch.Tensor:
    """The tensor a `share_cuda` handle names, mapped into this process on `device`."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    args = [_decode(a) for a in handle]
    args[6] = device.index if device.index is not None else torch.cuda.current_device()  # the storage's device
    return rebuild_cuda_tensor(*args)


# --- shared memory files (CPU) ------------------------------------------------------------------------


def shm_path(tag: str) -> str:
    return os.path.join(os.environ.get("TEMPO_RL_SHM_DIR", SHM_DIR), f"tempo-rl-weights-{tag}")


def create_shm(path: str, nbytes: int) -> torch.Tensor:
    """A uint8 tensor over a new file at `path`, written through to it (MAP_SHARED)."""
    with open(path, "xb") as f:
        f.truncate(nbytes)
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)


# --- the engine's side --------------------------------------------------------------------------------


def open_bucket(desc: dict, device: torch.device) -> torch.Tensor:
    """A private copy, on `device`, of the bucket `desc` describes: the trainer may refill its buffer
    as soon as this returns, while vLLM's layer-wise reload may still hold views of the tensors."""
    kind, nbytes = desc.get("kind"), int(desc.get("nbytes", -1))
    if kind == "cuda_ipc":
        uuid = gpu_uuid(device)
        handle = (desc.get("handles") or {}).get(uuid)
        if handle is None:
            raise BucketError(
                f"no copy of the weights on this engine's GPU {uuid} (the trainer's GPUs: "
                f"{', '.join(desc.get('handles') or {}) or 'none'}); the ipc transport needs the engine on"
                " its trainer's GPUs (engines.colocate)"
            )
        shared = open_cuda(handle, device)
        return shared[:nbytes].clone()
    if kind == "shm":
        path = str(desc.get("path", ""))
        if not os.path.isfile(path) or os.path.getsize(path) < nbytes:
            raise BucketError(
                f"bucket file {path!r} is not on this host: the ipc transport needs the engine on its trainer's host"
            )
        return torch.from_file(path, shared=False, size=nbytes, dtype=torch.uint8).to(device, copy=True)
    raise BucketError(f"unknown bucket kind {kind!r} (cuda_ipc or shm)")
