"""The plan of `make gpu-check` (bench/gpu_check.py): what a lent GPU machine has, what travels to
it, the model sizes, each part's time limit and the time estimate. Standard library only: the check's
parent process reads it without importing torch.

The lent machine (the device tool's KINDS.md, read 2026-11): one H100 or H200, python3 3.12 with CUDA
torch 2.11 and transformers 5.17, no network, no Ray; what the check needs beyond its image travels
as wheels (WHEELS), built here by `pip download` for that python, at most 64 MiB with the working tree.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = ROOT / "runs" / "gpu-check" / "wheels"
TRAVEL_LIMIT_MIB = 64.0
# The bound on the whole check; the check stops starting and ends parts at RUN_BUDGET_S, which
# leaves time to write the report before it.
DEVICE_BUDGET_S = 480.0
RUN_BUDGET_S = 450.0
DEVICE_PYTHON = "3.12"
PIP_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# Carried as wheels, at the versions this venv holds (what the dry run ran): megatron-core (the megatron
# backend), omegaconf (configs/ imports it), gymnasium and its farama-notifications (the tests' conftest
# reaches envs/). Their other requirements are on the image.
WHEELS = ("megatron-core", "omegaconf", "gymnasium", "farama-notifications")
# The image's Python packages (KINDS.md, "Python packages already there", read 2026-11-17).
DEVICE_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax
fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow
pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov
pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu
safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio
torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions
typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Size:
    """One size of the check: the Qwen3 model's shape and each part's work."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int
    vocab_size: int        # asked of the offline tokenizer; the model takes len(tokenizer)
    train_batch: int       # sequences per trainer step
    train_tokens: int      # tokens per sequence, the first train_prompt_tokens not trained
    train_prompt_tokens: int
    train_steps: int
    compare_batch: int     # the conversion's log-prob comparison
    compare_tokens: int
    serve_requests: int    # concurrent requests of the engine server's batched run
    serve_prompt_tokens: int
    serve_new_tokens: int

    def parameters(self) -> int:
        """Qwen3 parameters at this shape (tied embeddings, q/k norms), vocab as asked."""
        attention = self.hidden_size * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)
        mlp = 3 * self.hidden_size * self.intermediate_size
        norms = 2 * self.hidden_size + 2 * self.head_dim
        return self.num_layers * (attention + mlp + norms) + self.vocab_size * self.hidden_size + self.hidden_size


SIZES = {
    # Qwen3-0.6B's body (28 layers, hidden 1024, 16 query / 8 KV heads of 128, MLP 3072) with the offline
    # tokenizer's vocabulary (the built-in corpus runs out of merges near 5,500): ~0.44B parameters.
    "full": Size(hidden_size=1024, num_layers=28, num_heads=16, num_kv_heads=8, head_dim=128,
                 intermediate_size=3072, max_position_embeddings=4096, vocab_size=4096,
                 train_batch=8, train_tokens=512, train_prompt_tokens=64, train_steps=5,
                 compare_batch=4, compare_tokens=256,
                 serve_requests=32, serve_prompt_tokens=128, serve_new_tokens=128),
    # The dry run's: every part's code path in seconds on CPU.
    "tiny": Size(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                 intermediate_size=128, max_position_embeddings=512, vocab_size=512,
                 train_batch=2, train_tokens=32, train_prompt_tokens=8, train_steps=3,
                 compare_batch=2, compare_tokens=24,
                 serve_requests=4, serve_prompt_tokens=8, serve_new_tokens=8),
}

# The parts in the order they run, each with its time limit (s): the check ends a part at its limit
# (or at RUN_BUDGET_S) and goes on with the next. All but install and gpu_tests run in one worker process.
PARTS = (
    ("install", 60.0),            # the carried wheels into a folder on PYTHONPATH
    ("model", 120.0),             # the offline tokenizer and the Qwen3 checkpoint (policies/model.py)
    ("torch_trainer", 90.0),      # Trainer steps, trainer.backend=torch
    ("megatron_trainer", 120.0),  # Trainer steps, trainer.backend=megatron
    ("conversion", 120.0),        # HF -> megatron -> HF, log-probs agree before and after a step
    ("server", 90.0),             # the CPU engine server's scheduler and decoder on CUDA
    ("gpu_tests", 120.0),         # pytest -m gpu on the test files that hold the marker
)
WORKER_PARTS = ("model", "torch_trainer", "megatron_trainer", "conversion", "server")

# The time model behind `estimate` (assumptions, not readings: the dry run checks the plan against
# them; the device run's own figures replace them).
PROCESS_START_S = 30.0         # a fresh python importing torch, transformers, megatron-core, cold disk
CUDA_INIT_S = 10.0             # CUDA context, cuBLAS handles, first kernels
CPU_INIT_PARAMS_PER_S = 30e6   # random initialisation of a model on the CPU
DISK_BYTES_PER_S = 200e6       # safetensors written or read, and weights gathered to the CPU
TRAIN_FLOPS_PER_S = 10e12      # fp32 training steps: ~15% of an H100's fp32 peak, eager, unfused
LAYER_FORWARD_S = 1e-3         # eager overhead of one decoder layer in one decode step
TOKENIZER_S = 10.0             # training the offline tokenizer


def _train_step_flops(size: Size, batch: int, tokens: int) -> float:
    """Forward + backward: 6 per parameter per token, plus attention's scores and sums."""
    attention = 12 * size.num_layers * batch * size.num_heads * size.head_dim * tokens * tokens
    return 6 * size.parameters() * batch * tokens + attention


def estimate(size: Size) -> dict:
    """Seconds each part is expected to take on the device at `size`, by the time model above."""
    params = size.parameters()
    weight_bytes = 4 * params  # fp32
    load = weight_bytes / DISK_BYTES_PER_S
    init = params / CPU_INIT_PARAMS_PER_S
    step = _train_step_flops(size, size.train_batch, size.train_tokens) / TRAIN_FLOPS_PER_S
    compare = _train_step_flops(size, size.compare_batch, size.compare_tokens) / TRAIN_FLOPS_PER_S
    decode = 3 * size.serve_new_tokens * size.num_layers * LAYER_FORWARD_S  # warm-up, alone, batched
    parts = {
        "install": 10.0,
        "model": PROCESS_START_S + TOKENIZER_S + init + load,
        "torch_trainer": load + CUDA_INIT_S + (size.train_steps + 1) * step,
        "megatron_trainer": init + load + CUDA_INIT_S + (size.train_steps + 1) * step,
        "conversion": init + 4 * load + CUDA_INIT_S + 3 * compare,
        "server": load + CUDA_INIT_S + decode + 2 * compare,
        "gpu_tests": PROCESS_START_S + 30.0,
    }
    return {name: round(seconds, 1) for name, seconds in parts.items()}


def check_estimate(size: Size) -> dict:
    """The estimate against the limits: every part under its own, the sum under RUN_BUDGET_S."""
    parts = estimate(size)
    limits = dict(PARTS)
    over = [f"{name}: {parts[name]} s > its limit {limits[name]} s" for name in parts if parts[name] > limits[name]]
    total = round(sum(parts.values()), 1)
    if total > RUN_BUDGET_S:
        over.append(f"the parts together: {total} s > {RUN_BUDGET_S} s")
    return {"parts_s": parts, "total_s": total, "budget_s": RUN_BUDGET_S, "device_budget_s": DEVICE_BUDGET_S,
            "parameters": size.parameters(), "size": asdict(size), "fits": not over, "over": over}


def wheel_spec() -> list[str]:
    """`name==version` of each carried wheel, at this venv's versions."""
    spec = []
    for name in WHEELS:
        try:
            spec.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            raise RuntimeError(f"{name} is not installed here, so its version to carry is unknown: "
                               "run `make setup` (the venv the dry run uses)") from None
    return spec


def build_wheelhouse(folder: Path) -> None:
    """Download the carried wheels for the device's python (network: here, never there); a wheel of
    another version than this venv's (an older build) is removed first."""
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {normalized(item.replace("==", "-")) for item in wheel_spec()}
    for wheel in wheel_files(folder):
        if normalized("-".join(wheel.name.split("-")[:2])) not in wanted:
            wheel.unlink()
    platforms = [arg for p in PIP_PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", DEVICE_PYTHON, "--implementation", "cp", *platforms,
                    "-d", str(folder), *wheel_spec()], check=True)


def wheel_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.whl")) if folder.is_dir() else []


def wheelhouse_problems(folder: Path) -> list[str]:
    """What is wrong with the wheelhouse: a carried package missing, or two versions of one."""
    found: dict[str, list[str]] = {}
    for wheel in wheel_files(folder):
        name, version = wheel.name.split("-")[:2]
        found.setdefault(normalized(name), []).append(version)
    problems = [f"no wheel of {name} in {folder}" for name in WHEELS if normalized(name) not in found]
    problems += [f"{name}: several versions {versions} in {folder} (pip installs none)"
                 for name, versions in found.items() if len(versions) > 1]
    carried = {normalized(name) for name in WHEELS}  # a carried one missing from the folder is named above
    for wheel in wheel_files(folder):
        missing = [r for r in requirements(wheel) if r not in DEVICE_PACKAGES and r not in carried]
        if missing:
            problems.append(f"{wheel.name} requires {missing}, which the GPU machine lacks: add them to WHEELS")
    return problems


def requirements(wheel: Path) -> list[str]:
    """The distributions a wheel requires (Requires-Dist without extras; versions and markers not read)."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    return [normalized(re.match(r"[A-Za-z0-9._-]+", line.split(":", 1)[1].strip()).group(0))
            for line in lines if line.startswith("Requires-Dist:") and "extra ==" not in line]


def installed_bytes(name: str) -> int:
    """The files of an installed distribution: a bound on its wheel (a zip of the same files)."""
    files = importlib.metadata.distribution(name).files or []
    return sum(f.size or 0 for f in files)


def travel(folder: Path) -> dict:
    """MiB that would travel: the working tree (tracked and untracked-not-ignored files, as the device
    tool sends it) and the wheelhouse; without one, the installed files bound each wheel."""
    tree = sum(path.stat().st_size for path in _tree_files())
    wheels = wheel_files(folder)
    if wheels:
        carried, how = sum(w.stat().st_size for w in wheels), "wheels"
    else:
        carried, how = sum(installed_bytes(name) for name in WHEELS), "not built: bounded by the installed files"
    total = (tree + carried) / 2**20
    return {"tree_mib": round(tree / 2**20, 2), "wheels_mib": round(carried / 2**20, 2), "wheels": how,
            "total_mib": round(total, 2), "limit_mib": TRAVEL_LIMIT_MIB, "fits": total <= TRAVEL_LIMIT_MIB}


def _tree_files() -> list[Path]:
    """The files the device tool sends: git's tracked and untracked-not-ignored ones (without git, an
    export: every file but the ignored outputs)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout:
        return [ROOT / name for name in listed.stdout.split("\0") if name and (ROOT / name).is_file()]
    skip = {".git", "runs", "__pycache__"}
    return [p for p in ROOT.rglob("*") if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts)
            and not p.relative_to(ROOT).parts[0].startswith(".venv")]
