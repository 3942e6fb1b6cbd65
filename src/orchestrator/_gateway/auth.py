"""The gateway's credentials: the admin secret, signed spawn capabilities, the runtime file, the proof.

    Credentials.from_settings(settings)   admin secret (`gateway.token`, else generated at start) and
                                          signing key (`gateway.signing_key[_file]`, else random per process)
    credentials.mint(...) -> token        a spawn credential: a JWT (HS256, PyJWT) carrying its claims
    credentials.verify(token, spawn_id)   -> SpawnClaims, or CredentialError (expired, forged, other spawn)
    credentials.proof(nonce)              HMAC(admin secret, nonce): how a client tells the gateway from a
                                          process squatting on its port before it sends any secret
    RuntimeFile                           `{url, pid, secret, started}`, 0600, where `orchestrator spawn` finds
                                          the secret of the gateway `orchestrator serve` started

Spawn claims: `sub` the spawn id, `agent` the profile, `task` the task id, `pins` the recently called
tools it was planned with, `iat`/`exp`, `aud` AUDIENCE. A replica that shares the signing key can serve
any spawn from its token alone; only revocation (DELETE) needs the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._config import MIN_SIGNING_KEY_CHARS, MCPSettings
from .._errors import ConfigError, OrchestratorError

if TYPE_CHECKING:
    from .._config import Settings

__all__ = [
    "ALGORITHM",
    "AUDIENCE",
    "CredentialError",
    "Credentials",
    "RuntimeFile",
    "SpawnClaims",
    "SpawnClosedError",
    "SpawnLimitError",
    "bearer_token",
    "check_proof",
    "new_nonce",
    "runtime_dir",
]

ALGORITHM = "HS256"
"""One symmetric algorithm, pinned on verify: a token naming another ("none", RS256) is refused."""
AUDIENCE = "orchestrator-gateway"
"""The `aud` of every spawn credential: a token signed with the same key for something else is refused."""
KEY_ID_LABEL = b"orchestrator spawn key id v1\x00"
KEY_ID_CHARS = 16
SECRET_BYTES = 32
"""Generated admin secrets and signing keys: 256 bits, the size of HS256's hash."""
NONCE_BYTES = 32
CLOCK_LEEWAY_S = 5.0
"""Replicas on several machines: clocks a few seconds apart must not expire a fresh token early."""
PROOF_LABEL = b"orchestrator gateway proof v1\x00"
"""Domain separation: a proof is an HMAC of this label and the client's nonce, useful for nothing else."""
RUNTIME_FOLDER = "orchestrator"
MAX_RUNTIME_FILE_BYTES = 4096


def _jwt() -> ModuleType:
    """PyJWT, imported on the first credential minted or checked: about 50 ms of CPU (it loads cryptography's
    algorithms) that `serve --transport stdio` and the other CLI commands, which mint none, never need."""
    import jwt

    return jwt


class CredentialError(OrchestratorError):
    """A spawn credential that is missing, malformed, forged, expired or for another spawn."""


class SpawnClosedError(CredentialError):
    """A spawn credential that is valid but was revoked: its spawn was closed (the router answers 404)."""


class SpawnLimitError(OrchestratorError):
    """`gateway.max_open_spawns` spawns are open already (`POST /spawns` answers 429)."""


@dataclass(frozen=True)
class SpawnClaims:
    """What a verified spawn credential says: enough for any replica to serve the spawn."""

    spawn_id: str
    agent: str
    task_id: str
    pins: tuple[str, ...]
    """Recently called tools the spawn was planned with (pinned in its plan on every replica)."""
    issued: float
    expires: float
    """Unix time after which the credential is refused and the spawn's state dropped."""

    def remaining_s(self, now: float | None = None) -> float:
        return self.expires - (time.time() if now is None else now)


class Credentials:
    """The admin secret and the signing key of one gateway (or of replicas that share them).

    Args:
        admin_secret: what `/health`, `/spawns` and `/mcp` require as `Authorization: Bearer`.
        signing_key: the HS256 key of spawn credentials (at least 32 bytes).
        generated: True when the admin secret was made at start (so `serve` writes the runtime file).
        leeway_s: how far past `exp` a credential is still accepted (clocks of replicas differ a little).
    """

    def __init__(
        self, admin_secret: str, signing_key: bytes, *, generated: bool = False, leeway_s: float = CLOCK_LEEWAY_S
    ) -> None:
        if len(signing_key) < MIN_SIGNING_KEY_CHARS:
            raise ConfigError(f"gateway.signing_key: at least {MIN_SIGNING_KEY_CHARS} bytes for HS256")
        if not admin_secret:
            raise ConfigError("gateway.token: empty")
        self.admin_secret = admin_secret
        self._key = signing_key
        self.generated = generated
        self.leeway_s = leeway_s
        self.key_id = hmac.new(signing_key, KEY_ID_LABEL, hashlib.sha256).hexdigest()[:KEY_ID_CHARS]
        """Names the signing key without revealing it: the store's spawn records carry it, so a gateway
        counts only the spawns whose credentials it can verify (not a restarted process's old key's)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Credentials:
        """`gateway.token` (else a new secret) and `gateway.signing_key` / `signing_key_file` (else a new
        key, valid in this process only).

        Raises:
            ConfigError: the key file cannot be read, is too short, or other users can read it.
        """
        gw = settings.gateway
        token = gw.token
        secret = token if token else secrets.token_urlsafe(SECRET_BYTES)
        if gw.signing_key is not None:
            key = gw.signing_key.encode("utf-8")
        elif gw.signing_key_file is not None:
            key = _read_key_file(Path(gw.signing_key_file).expanduser())
        else:
            key = secrets.token_bytes(SECRET_BYTES)
        return cls(secret, key, generated=not token)

    # ------------------------------------------------------------------ the admin secret

    def is_admin(self, sent: str) -> bool:
        """True when `sent` is the admin secret (compared in constant time)."""
        return bool(sent) and hmac.compare_digest(sent.encode("utf-8"), self.admin_secret.encode("utf-8"))

    def proof(self, nonce: str) -> str:
        """HMAC-SHA256 of the client's nonce under the admin secret, hex."""
        return _proof(self.admin_secret, nonce)

    # ------------------------------------------------------------------ spawn credentials

    def mint(self, spawn_id: str, agent: str, task_id: str, pins: list[str], ttl_s: float) -> tuple[str, SpawnClaims]:
        """A signed spawn credential and the claims it carries."""
        now = int(time.time())
        expires = now + max(1, int(ttl_s))
        payload = {
            "sub": spawn_id,
            "agent": agent,
            "task": task_id,
            "pins": list(pins),
            "iat": now,
            "exp": expires,
            "aud": AUDIENCE,
        }
        token = _jwt().encode(payload, self._key, algorithm=ALGORITHM)
        return token, SpawnClaims(spawn_id, agent, task_id, tuple(pins), float(now), float(expires))

    def verify(self, token: str, spawn_id: str) -> SpawnClaims:
        """The claims of a credential for `spawn_id`, checked: signature, algorithm, audience, expiry.

        Raises:
            CredentialError: one line saying what is wrong (never which part of a forged token).
        """
        if not token:
            raise CredentialError("missing bearer token (Authorization: Bearer <spawn token>)")
        jwt = _jwt()
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                leeway=self.leeway_s,
                options={"require": ["sub", "exp", "iat", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise CredentialError("spawn credential expired (gateway.spawn_ttl_s)") from None
        except jwt.PyJWTError:
            raise CredentialError("missing or wrong bearer token (Authorization: Bearer <spawn token>)") from None
        if not hmac.compare_digest(str(claims.get("sub", "")).encode("utf-8"), spawn_id.encode("utf-8")):
            raise CredentialError("this credential is for another spawn")
        agent, task_id, pins = claims.get("agent"), claims.get("task"), claims.get("pins", [])
        if not isinstance(agent, str) or not isinstance(task_id, str):
            raise CredentialError("spawn credential lacks its agent or task")
        if not isinstance(pins, list) or not all(isinstance(pin, str) for pin in pins):
            raise CredentialError("spawn credential has malformed pins")
        return SpawnClaims(spawn_id, agent, task_id, tuple(pins), float(claims["iat"]), float(claims["exp"]))


def bearer_token(headers: Mapping[str, str]) -> str:
    """The token of an `Authorization: Bearer <token>` header; "" when there is none."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def check_proof(secret: str, nonce: str, proof: Any) -> bool:
    """True when `proof` is the gateway's answer to `nonce` under `secret` (constant-time compare)."""
    return isinstance(proof, str) and hmac.compare_digest(proof.encode("utf-8"), _proof(secret, nonce).encode("utf-8"))


def _proof(secret: str, nonce: str) -> str:
    return hmac.new(secret.encode("utf-8"), PROOF_LABEL + nonce.encode("utf-8"), hashlib.sha256).hexdigest()


def _read_key_file(path: Path) -> bytes:
    try:
        info = path.stat()
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"gateway.signing_key_file: cannot read {path}: {exc}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"gateway.signing_key_file: {path} is open to other users; chmod 600 it")
    key = text.strip().splitlines()[0].strip() if text.strip() else ""
    if len(key) < MIN_SIGNING_KEY_CHARS:
        raise ConfigError(
            f"gateway.signing_key_file: {path} holds {len(key)} characters; HS256 needs at least {MIN_SIGNING_KEY_CHARS}"
        )
    return key.encode("utf-8")


# --------------------------------------------------------------------------- the runtime file


def runtime_dir(settings: Settings | None = None) -> Path:
    """`$XDG_RUNTIME_DIR/orchestrator` when the session has one, else the cache root's `run/` (the
    default cache root without `settings`)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir():
        return Path(xdg) / RUNTIME_FOLDER
    mcp = settings.mcp if settings is not None else MCPSettings()
    return mcp.cache_root() / "run"


class RuntimeFile:
    """`{url, pid, secret, started}` of a running `orchestrator serve`, readable by the user only.

    One file per address (`gateway-<host>-<port>.json`), in a folder only the user may enter. Written
    with O_CREAT|O_EXCL and mode 0600 from the first byte (never a moment world-readable, never through a
    planted symlink), removed when the gateway stops.
    """

    def __init__(self, folder: Path, base_url: str) -> None:
        parts = urlsplit(base_url)
        host = (parts.hostname or "localhost").replace(":", "_")
        self.folder = folder
        self.path = folder / f"gateway-{host}-{parts.port or 80}.json"

    @classmethod
    def for_settings(cls, settings: Settings, base_url: str) -> RuntimeFile:
        return cls(runtime_dir(settings), base_url)

    @contextlib.contextmanager
    def written(self, url: str, secret: str) -> Iterator[Path]:
        """Write the file for the duration of the block.

        Raises:
            ConfigError: the folder is not the user's alone, or the file cannot be created.
        """
        self._private_folder(create=True)
        record = {"url": url, "pid": os.getpid(), "secret": secret, "started": time.time()}
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a stale file of a gateway that was killed; we hold the port now
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            raise ConfigError(f"gateway: cannot write the runtime file {self.path}: {exc.strerror or exc}") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
            yield self.path
        finally:
            with contextlib.suppress(OSError):
                current = json.loads(self.path.read_text(encoding="utf-8"))
                if current.get("pid") == os.getpid():  # a newer gateway may have replaced it
                    self.path.unlink()

    def read_secret(self) -> str | None:
        """The secret in the file, None when there is none; a file or folder other users could read or
        write is ignored (its secret may be known, or planted)."""
        try:
            self._private_folder(create=False)
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except (OSError, ConfigError):
            return None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                return None
            raw = handle.read(MAX_RUNTIME_FILE_BYTES)
        try:
            record = json.loads(raw)
        except ValueError:
            return None
        secret = record.get("secret") if isinstance(record, dict) else None
        return secret if isinstance(secret, str) and secret else None

    def _private_folder(self, *, create: bool) -> None:
        if create:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.lstat(self.folder)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != 0o700:
                os.chmod(self.folder, 0o700)  # ours, made under a loose umask: close it
        info = os.lstat(self.folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(
                f"gateway: the runtime folder {self.folder} must be a folder of this user's, closed to others "
                "(chmod 700)"
            )
