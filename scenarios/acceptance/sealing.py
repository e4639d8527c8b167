"""The reserved split sealed by an evaluator-held secret: derivation, commitment, unsealing.

The reserved variants (values, store names, references, check queries) are generated at run
time from a secret the evaluator holds (`BACKINTEL_RESERVED_SECRET`, or a file outside the
repository named by `BACKINTEL_RESERVED_SECRET_FILE`). The repository keeps only the generator
and `acceptance-v1/reserved.commitment.json`: per case a sha256 of its generated manifest entry
(scenario, reference, planting, store checksums), the whole manifest's sha256, the builder
version and an id of the secret (an HMAC, which does not reveal it). Unsealing regenerates the
split and refuses a missing secret, a different secret and a changed generator, each by name.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock

from pytest_backintel.collect.sealed import SealedSuiteError
from scenarios.acceptance.builder import AcceptanceSettings, build_acceptance
from scenarios.acceptance.manifest import MANIFEST_DIR, SUITE, Manifest, ManifestCase
from scenarios.acceptance.verify import case_problems

__all__ = [
    "COMMITMENT_PATH",
    "FIXED_BY_SPEC",
    "SECRET_ENV",
    "SECRET_FILE_ENV",
    "build_reserved",
    "commitment_for",
    "draw_secret",
    "load_commitment",
    "read_secret",
    "repeats",
    "secret_id",
    "unseal",
    "unsealed_path",
    "write_commitment",
]

SECRET_ENV = "BACKINTEL_RESERVED_SECRET"
SECRET_FILE_ENV = "BACKINTEL_RESERVED_SECRET_FILE"
COMMITMENT_PATH = MANIFEST_DIR / "reserved.commitment.json"
REPO_ROOT = MANIFEST_DIR.parent.parent.parent
MIN_SECRET_CHARS = 32
GENERATOR_DIR = Path(__file__).resolve().parent

FIXED_BY_SPEC = {
    ("zero-profit", "net_profit"),
    ("mix-only-prices", "price_change"),
    ("late-arrivals-first", "current_delivered_orders"),
    ("late-arrivals-first", "current_pending_orders"),
    ("late-arrivals-next", "current_delivered_orders"),
    ("late-arrivals-next", "current_pending_orders"),
}
"""(case key, metric) whose value the specification fixes in both splits: zero results and the
2/2 -> 4/0 delayed-observation counts. Text metrics (the yes/no alerts) are fixed by design."""

MISSING = (
    f"the reserved suite {SUITE} is sealed: its cases, values and references are generated "
    "from the evaluator's secret, which is not set. Set {env} to the secret, or {file_env} to "
    "a file outside the repository holding it (the evaluator keeps it; it is never committed)"
).format(env=SECRET_ENV, file_env=SECRET_FILE_ENV)


def read_secret(root: Path = REPO_ROOT) -> bytes:
    """The evaluator's secret from the environment or a file outside `root`."""
    text = os.environ.get(SECRET_ENV, "").strip()
    source = SECRET_ENV
    file_name = os.environ.get(SECRET_FILE_ENV, "").strip()
    if not text and file_name:
        path = Path(file_name).expanduser().resolve()
        source = f"{SECRET_FILE_ENV}={path}"
        if path.is_relative_to(root.resolve()):
            raise SealedSuiteError(
                f"{source}: the secret file is inside the repository ({root}); keep it outside, "
                "where no worker or commit can reach it"
            )
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SealedSuiteError(f"{source}: cannot read the secret file: {exc}") from exc
    if not text:
        raise SealedSuiteError(MISSING)
    if len(text) < MIN_SECRET_CHARS:
        raise SealedSuiteError(
            f"{source}: the secret has {len(text)} characters; at least {MIN_SECRET_CHARS} are "
            "needed (`backintel reserve rotate` draws one)"
        )
    return text.encode("utf-8")


def secret_id(secret: bytes) -> str:
    """A public id of the secret (HMAC-SHA256 of a fixed label): names it without revealing it."""
    return hmac.new(secret, b"backintel reserved secret id", hashlib.sha256).hexdigest()[:16]


def reserved_seed(secret: bytes) -> int:
    digest = hmac.new(secret, f"{SUITE}|reserved|seed".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big")


GENERATOR_FILES = (
    "builder.py",
    "checks.py",
    "ledgers.py",
    "manifest.py",
    "model.py",
    "monitoring.py",
    "payments.py",
    "pricing.py",
    "replay.py",
    "reports.py",
    "storage.py",
)
"""The modules whose code decides a case's content (the commitment's code hash covers them)."""


def generator_sha256() -> str:
    """sha256 over the generator's source (`GENERATOR_FILES`): a diagnostic only; the case
    commitments decide whether the suite is the sealed one."""
    h = hashlib.sha256()
    for path in (GENERATOR_DIR / name for name in GENERATOR_FILES):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def build_reserved(secret: bytes, data_dir: Path) -> Manifest:
    """Generate the reserved split from `secret` under `<data_dir>/acceptance/reserved/`."""
    return build_acceptance(AcceptanceSettings(data_dir, reserved_seed(secret)), "reserved")


def case_commitment(case: ManifestCase) -> str:
    text = json.dumps(case.to_dict(), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def commitment_for(manifest: Manifest, secret: bytes, rotation: int) -> dict[str, Any]:
    """The committed stand-in for a generated reserved manifest (no value, no question)."""
    return {
        "suite": manifest.suite,
        "split": manifest.split,
        "sealed": {
            "world": SUITE,
            "secret_id": secret_id(secret),
            "builder_version": manifest.builder_version,
            "generator_sha256": generator_sha256(),
            "manifest_sha256": hashlib.sha256(manifest.to_json().encode()).hexdigest(),
            "rotation": rotation,
        },
        "cases": [
            {
                "id": c.id,
                "level": c.scenario["level"],
                "family": c.scenario["family"],
                "answerable": c.scenario["answerable"],
                "commitment": case_commitment(c),
            }
            for c in manifest.cases
        ],
    }


def write_commitment(data: dict[str, Any], path: Path = COMMITMENT_PATH) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def load_commitment(path: Path = COMMITMENT_PATH) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SealedSuiteError(f"cannot read the reserved commitment {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("sealed"), dict):
        raise SealedSuiteError(f"{path}: not a sealed-suite commitment (no 'sealed' block)")
    return data


def repeats(development: Manifest, reserved: Manifest) -> list[str]:
    """Reserved reference values equal to their development counterparts, where the
    specification does not fix them."""
    dev = {c.snapshot.split("-", 1)[1]: c for c in development.cases}
    out = []
    for case in reserved.cases:
        key = case.snapshot.split("-", 1)[1]
        kinds = {m["name"]: m["kind"] for m in case.scenario.get("metrics", [])}
        for name, value in case.reference.items():
            if kinds.get(name) == "text" or (key, name) in FIXED_BY_SPEC:
                continue
            if key in dev and dev[key].reference.get(name) == value:
                out.append(f"{case.id}.{name} = {value!r}")
    return out


def draw_secret(development: Manifest, data_dir: Path, tries: int = 50) -> str:
    """A new random secret whose reserved variant repeats no development value."""
    for _ in range(tries):
        candidate = secrets.token_hex(32)
        if not repeats(development, build_reserved(candidate.encode(), data_dir)):
            return candidate
    raise SealedSuiteError(f"no secret in {tries} draws avoids every development value")


def unsealed_path(data_dir: Path) -> Path:
    """Where the generated reserved manifest lives (outside Git, beside its stores)."""
    return data_dir / "acceptance" / "reserved" / "manifest.json"


def _mismatch(committed: dict[str, Any], built: dict[str, Any], path: Path) -> str:
    sealed, now = committed["sealed"], built["sealed"]
    theirs = {c["id"]: c["commitment"] for c in committed["cases"]}
    ours = {c["id"]: c["commitment"] for c in built["cases"]}
    if sealed.get("secret_id") != now["secret_id"]:
        return (
            f"{path}: the secret set (id {now['secret_id']}) is not the one this commitment was "
            f"issued for (id {sealed.get('secret_id')}): a different secret generates a "
            "different suite; use the evaluator's secret for this rotation"
        )
    if theirs.keys() != ours.keys():
        gone, new = sorted(theirs.keys() - ours.keys()), sorted(ours.keys() - theirs.keys())
        changed = f"cases committed but not generated: {gone}; generated but not committed: {new}"
    else:
        changed = "cases whose generated manifest or stores differ from their commitment: " + (
            ", ".join(k for k in sorted(ours) if ours[k] != theirs[k]) or "(case order)"
        )
    code = (
        "generator code differs from the commitment's"
        if sealed.get("generator_sha256") != now["generator_sha256"]
        else "generator code is unchanged"
    )
    return (
        f"{path}: the generator changed: {changed} (builder version committed "
        f"{sealed.get('builder_version')}, now {now['builder_version']}; {code}). A frozen run "
        "must measure exactly the sealed suite: restore the generator, or have the evaluator "
        "re-issue the commitment deliberately (`backintel reserve commit`)"
    )


def unseal(
    commitment: Path, data_dir: Path, secret: bytes | None = None
) -> tuple[Path, dict[str, Any]]:
    """Regenerate the sealed reserved split under `data_dir`, check it against `commitment`,
    and write its manifest (references included) beside its stores, outside Git."""
    committed = load_commitment(commitment)
    secret = read_secret() if secret is None else secret
    rotation = committed["sealed"].get("rotation", 1)
    with tempfile.TemporaryDirectory(prefix="backintel-unseal-") as scratch:
        built = commitment_for(build_reserved(secret, Path(scratch)), secret, rotation)
    if built["sealed"]["secret_id"] != committed["sealed"].get("secret_id") or (
        built["cases"] != committed["cases"]
        or built["sealed"]["manifest_sha256"] != committed["sealed"].get("manifest_sha256")
    ):
        raise SealedSuiteError(_mismatch(committed, built, commitment))
    target = unsealed_path(data_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / ".unseal.lock")):
        manifest = _reuse(target, committed, data_dir)
        if manifest is None:
            manifest = build_reserved(secret, data_dir)
            manifest.write(target)
    return target, {
        "suite": committed["suite"],
        "secret_id": committed["sealed"]["secret_id"],
        "rotation": committed["sealed"].get("rotation"),
        "manifest_sha256": committed["sealed"]["manifest_sha256"],
        "cases": len(manifest.cases),
        "verified": True,
    }


def _reuse(target: Path, committed: dict[str, Any], data_dir: Path) -> Manifest | None:
    """The already unsealed manifest when it and every store still match the commitment (so
    concurrent workers never rewrite files another one is reading)."""
    if not target.is_file():
        return None
    text = target.read_text(encoding="utf-8")
    if hashlib.sha256(text.encode()).hexdigest() != committed["sealed"]["manifest_sha256"]:
        return None
    manifest = Manifest.from_dict(json.loads(text))
    intact = all(
        not case_problems(c, data_dir) and (data_dir / c.store.parquet_dir).is_dir()
        for c in manifest.cases
    )
    return manifest if intact else None


def issue(secret: bytes, data_dir: Path, path: Path = COMMITMENT_PATH) -> dict[str, Any]:
    """Write the commitment of the suite `secret` generates with the current generator."""
    rotation = 1
    if path.is_file():
        rotation = int(load_commitment(path)["sealed"].get("rotation", 1))
    data = commitment_for(build_reserved(secret, data_dir), secret, rotation)
    write_commitment(data, path)
    return data
