"""Execution ids, deterministic Run/Attempt ids and task revisions (docs/CONTRACT.md)."""
from __future__ import annotations

import hashlib
import json
import re

from qlshadow.storage.models import DEFINITION_FIELDS, REQUIRED_FIELDS
from qlshadow.parse import TIME_MAX

# An id beyond the API's time range is invalid: an accept failure, never a refused callback.
MAX_SECONDS = TIME_MAX
PROJECT_ID = "default"
_OPTIONAL_FIELDS = frozenset(DEFINITION_FIELDS) - frozenset(REQUIRED_FIELDS)

_EXECUTION_ID = re.compile(
    r"legacy-system:([1-9][0-9]{0,11}):"
    r"([0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})")


def parse_execution_id(value: object) -> int | None:
    """Return the start seconds of a valid execution_id, or None when it is invalid."""
    if type(value) is not str:
        return None
    match = _EXECUTION_ID.fullmatch(value)
    if match is None:
        return None
    seconds = int(match.group(1))
    return seconds if seconds <= MAX_SECONDS else None


def deterministic_id(kind: str, project_id: str, request_id: str, ms: int) -> str:
    """UUIDv7-shaped id: 48-bit ms, then bits of sha256(kind|project|request|ms)."""
    return _shaped(hashlib.sha256(f"{kind}|{project_id}|".encode()), request_id, ms)


def _shaped(prefix, request_id: str, ms: int) -> str:
    # prefix: a sha256 that has taken "kind|project|" (UTF-8 of a concatenation is the
    # concatenation of the UTF-8s, so the digest is that of the whole text).
    prefix.update(f"{request_id}|{ms}".encode())
    h = prefix.digest()
    raw = (ms.to_bytes(6, "big") + bytes((0x70 | (h[0] & 0x0F), h[1], 0x80 | (h[2] & 0x3F)))
           + h[3:10]).hex()
    return f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"


# The default project's prefixes, hashed once: every Shadow callback makes both ids, and
# copying a started hash is cheaper than hashing the prefix again.
_RUN_PREFIX = hashlib.sha256(f"run|{PROJECT_ID}|".encode())
_ATTEMPT_PREFIX = hashlib.sha256(f"attempt:1|{PROJECT_ID}|".encode())


def run_id(request_id: str, seconds: int, project_id: str = PROJECT_ID) -> str:
    """The Run id of an execution accepted at `seconds`."""
    if project_id == PROJECT_ID:
        return _shaped(_RUN_PREFIX.copy(), request_id, seconds * 1000)
    return deterministic_id("run", project_id, request_id, seconds * 1000)


def attempt_id(request_id: str, seconds: int, project_id: str = PROJECT_ID) -> str:
    """The id of that Run's single Attempt (number 1)."""
    if project_id == PROJECT_ID:
        return _shaped(_ATTEMPT_PREFIX.copy(), request_id, seconds * 1000)
    return deterministic_id("attempt:1", project_id, request_id, seconds * 1000)


def seconds_of_run_id(value: str) -> int | None:
    """The accepted seconds encoded in a run id's first 48 bits (None if not whole seconds)."""
    try:
        ms = int(value[:8] + value[9:13], 16)
    except ValueError:
        return None
    return ms // 1000 if ms % 1000 == 0 else None


def task_revision(doc: dict) -> str:
    """sha256 hex of the cron definition as stored; one function for every origin."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def revision_doc(name: str, command: str, schedule: str, **optional) -> dict:
    """The cron definition a task revision covers, normalised as docs/CONTRACT.md says.

    optional holds the other definition fields (models.DEFINITION_FIELDS, extra_schedules
    as a list); a field not given is unset: null, and allow_multiple_instances 0.
    """
    unknown = optional.keys() - _OPTIONAL_FIELDS
    if unknown:
        raise TypeError(f"not a cron definition field: {sorted(unknown)[0]}")
    doc = dict.fromkeys(DEFINITION_FIELDS)
    doc.update(optional, name=name, command=command, schedule=schedule)
    doc["allow_multiple_instances"] = 1 if doc["allow_multiple_instances"] else 0
    return doc


# --- stored forms (models.ShadowRun keeps ids and hashes as bytes) ---------------------------

REQUEST_PREFIX = "legacy-system:"


def uuid_bytes(text: str) -> bytes:
    """The 16 bytes of a UUID written as lowercase text (byte order is text order)."""
    return bytes.fromhex(text.replace("-", ""))


def uuid_text(raw: bytes) -> str:
    """The lowercase text of a UUID's 16 stored bytes."""
    h = bytes(raw).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def request_uuid(execution_id: str) -> bytes:
    """The UUID part of a valid execution id, as stored."""
    return uuid_bytes(execution_id.rsplit(":", 1)[1])


def request_id_of(seconds: int, raw_uuid: bytes) -> str:
    """The execution id a stored Run was accepted with (parse_execution_id's inverse)."""
    return f"{REQUEST_PREFIX}{seconds}:{uuid_text(raw_uuid)}"
