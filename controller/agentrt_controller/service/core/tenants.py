"""Tenants: who holds which API key, their weights, cache groups and quotas (docs/security.md).

A tenant is whoever holds one of its API keys. Keys come from three places, merged:

* a **key file** (TOML, ``api_key_file``) that stores only hashes of keys::

      [defaults]                        # optional: quota defaults for every tenant
      max_in_flight = 64

      [tenants.alice]
      keys = ["sha256:5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"]
      weight = 2.0                      # fair-share weight (> 0)
      cache_group = "public-docs"       # tenants of one group share prefix-cache entries
      max_programs = 100                # concurrent programs
      tokens_per_minute = 200000        # 0 = unlimited
      over_quota = "queue"              # or "reject" (HTTP 429, the default)
      share_statistics = true           # feed the retention's global prior (default false)

  (``agentrt controller hash-key`` prints the hash of a key read from standard input);
* ``api_keys`` (``AGENTRT_CONTROLLER_API_KEYS``): ``tenant=key,tenant=key`` with plain keys or
  ``sha256:`` hashes, every tenant with the default quotas;
* ``api_key`` (vLLM's ``--api-key``): one key for the one tenant ``default``.

No key anywhere is the open mode: every caller is the tenant ``default`` and no quota applies
(the controller's behaviour before tenants existed). A key file that does not parse, names an
unknown field, holds a malformed hash, or repeats a key or a tenant is a
:class:`~agentrt.errors.ConfigError` naming the file and the line; the controller does not
start. Keys are compared as SHA-256 digests with :func:`hmac.compare_digest`, all of them on
every lookup, so the time taken does not depend on which stored key (if any) matched.

Prefix-cache salts (vLLM's ``cache_salt``) are derived here: ``HMAC-SHA256(secret, group)``
where the group is the tenant's ``cache_group`` or its own name, so a salt cannot be guessed
from a tenant name, and a salt a tenant may choose (``choose_cache_salt = true``) is namespaced
inside the tenant's group: it can split its own cache, never join another's.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from agentrt.errors import ConfigError
from agentrt_controller.service.errors import Unauthorized  # in the one tree; named here too

__all__ = [
    "ADMIN_STATE",
    "DEFAULT_TENANT",
    "TENANT_STATE",
    "Tenant",
    "TenantDirectory",
    "TenantQuota",
    "Unauthorized",
    "build_directory",
    "hash_key",
    "load_key_file",
]

#: The tenant of open mode and of vLLM's single ``--api-key``.
DEFAULT_TENANT = "default"
#: Key of the authenticated :class:`Tenant` in an ASGI scope's ``state`` (absent = the admin,
#: on the introspection endpoints).
TENANT_STATE = "agentrt_tenant"
#: Key of ``True`` in an ASGI scope's ``state`` when the caller showed the admin token.
ADMIN_STATE = "agentrt_admin"


_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
OverQuota = Literal["reject", "queue"]


def hash_key(key: str) -> str:
    """The stored form of an API key: ``sha256:<64 hex digits>`` of its UTF-8 bytes."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """Per-tenant limits; ``None`` = unlimited. Enforced by the controller (docs/security.md,
    "Quotas")."""

    #: Programs of the tenant live in the process table at once.
    max_programs: int | None = 1000
    #: Calls of the tenant accepted and not finished (queued at the controller or running).
    max_in_flight: int | None = 256
    #: Prompt + output tokens charged per minute (a token bucket of one minute's worth).
    tokens_per_minute: int | None = None
    #: Longest life of one program (seconds since its first event or call).
    max_program_wall_s: float | None = None
    #: Over a quota: ``reject`` answers HTTP 429 with ``Retry-After``; ``queue`` holds the
    #: call until the tenant is under quota again (or its deadline passes). Programs over
    #: ``max_programs`` or ``max_program_wall_s`` are always rejected.
    over_quota: OverQuota = "reject"

    def __post_init__(self) -> None:
        for name in ("max_programs", "max_in_flight", "tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{name} must be an integer")
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be >= 1 (or 0 / absent for unlimited)")
        wall = self.max_program_wall_s
        if wall is not None and not (wall > 0 and math.isfinite(wall)):
            raise ConfigError("max_program_wall_s must be a finite number of seconds > 0")
        if self.over_quota not in ("reject", "queue"):
            raise ConfigError(f"over_quota must be reject or queue, got {self.over_quota!r}")


#: No limits (open mode).
UNLIMITED = TenantQuota(max_programs=None, max_in_flight=None)


@dataclass(frozen=True, slots=True)
class Tenant:
    """One tenant as configured."""

    name: str
    #: Fair-share weight between tenants (> 0; a tenant of weight 2 gets twice the service of
    #: a tenant of weight 1 when both have calls queued).
    weight: float = 1.0
    #: Tenants naming the same group share prefix-cache entries; ``None`` = the tenant alone.
    cache_group: str | None = None
    #: The tenant may set ``cache_salt`` itself (namespaced inside its group); otherwise a
    #: client's ``cache_salt`` is replaced by the tenant's.
    choose_cache_salt: bool = False
    quota: TenantQuota = field(default_factory=TenantQuota)
    #: The tenant's tool durations and return counts feed the retention policy's global
    #: prior, which every tenant plans with for names it has too few samples of its own
    #: (docs/tenancy.md, "Sharing learned statistics"). Off: its traffic shapes only its own
    #: retention decisions.
    share_statistics: bool = False

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ConfigError(f"tenant name {self.name!r} must be 1-64 of [A-Za-z0-9._-]")
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise ConfigError(f"tenant {self.name}: weight must be a finite number > 0")
        if self.cache_group is not None and not self.cache_group:
            raise ConfigError(f"tenant {self.name}: cache_group must not be empty")
        if not isinstance(self.share_statistics, bool):
            raise ConfigError(f"tenant {self.name}: share_statistics must be true or false")

    @property
    def salt_group(self) -> str:
        """The name the tenant's cache salt is derived from."""
        if self.cache_group is not None:
            return "group:" + self.cache_group
        return "tenant:" + self.name


class TenantDirectory:
    """API-key hashes → tenants, and the cache salts (see the module docstring).

    ``keys`` maps stored hashes (``sha256:<hex>``) to tenant names; every named tenant must be
    in ``tenants``. ``secret`` keys the salt derivation (random when ``None``: salts change on
    restart, which only costs cache hits). Empty ``keys`` = open mode.
    """

    def __init__(
        self,
        tenants: Mapping[str, Tenant],
        keys: Mapping[str, str],
        *,
        secret: str | None = None,
        source: str = "",
    ) -> None:
        unknown = sorted(set(keys.values()) - set(tenants))
        if unknown:
            raise ConfigError(f"API keys name unknown tenants {unknown}")
        self.open = not keys
        self.tenants: dict[str, Tenant] = dict(tenants)
        if self.open:
            self.tenants = {DEFAULT_TENANT: Tenant(DEFAULT_TENANT, quota=UNLIMITED)}
        self._digests = [(bytes.fromhex(h.removeprefix("sha256:")), t) for h, t in keys.items()]
        self._secret = (secret or secrets.token_hex(32)).encode("utf-8")
        self._salts: dict[tuple[str, str], str] = {}
        #: Where the keys came from, for the start-up line.
        self.source = source

    @classmethod
    def open_mode(cls) -> TenantDirectory:
        """No keys: every caller is :data:`DEFAULT_TENANT`, no quotas."""
        return cls({}, {}, source="no API keys")

    def authenticate(self, authorization: str | None) -> Tenant | None:
        """The tenant whose key is the bearer token of an ``Authorization`` header value;
        ``None`` when the header is missing, malformed or holds no known key. Open mode:
        always :data:`DEFAULT_TENANT`."""
        if self.open:
            return self.tenants[DEFAULT_TENANT]
        if not authorization:
            return None
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        found: str | None = None
        for stored, tenant in self._digests:  # all of them: no early exit (timing)
            if hmac.compare_digest(stored, digest):
                found = tenant
        return None if found is None else self.tenants[found]

    def cache_salt(self, tenant: Tenant, chosen: str | None = None) -> str:
        """The ``cache_salt`` to send for ``tenant``; ``chosen`` = the client's own salt where
        the tenant may choose one (namespaced inside the tenant's group)."""
        part = chosen if chosen is not None and tenant.choose_cache_salt else ""
        key = (tenant.salt_group, part)
        salt = self._salts.get(key)
        if salt is None:
            message = f"{tenant.salt_group}\x00{part}".encode()
            salt = "agentrt-" + hmac.new(self._secret, message, hashlib.sha256).hexdigest()[:32]
            if len(self._salts) < 100_000:  # bounded: chosen salts are client input
                self._salts[key] = salt
        return salt

    def weights(self) -> dict[str, float]:
        """Fair-share weight by tenant name."""
        return {name: tenant.weight for name, tenant in self.tenants.items()}

    def sharing_statistics(self) -> frozenset[str]:
        """Tenants whose learned statistics feed the global prior (``share_statistics``)."""
        return frozenset(name for name, tenant in self.tenants.items() if tenant.share_statistics)

    def describe(self) -> str:
        """One phrase for the start-up line."""
        if self.open:
            return f"tenants=open(one tenant {DEFAULT_TENANT!r}, no API keys)"
        return f"tenants={len(self.tenants)}({self.source})"


# --- building a directory from configuration --------------------------------------------------

_QUOTA_FIELDS = {f.name for f in fields(TenantQuota)}
_TENANT_FIELDS = {
    "keys",
    "weight",
    "cache_group",
    "choose_cache_salt",
    "share_statistics",
    *_QUOTA_FIELDS,
}


def _line_of(lines: list[str], pattern: re.Pattern[str], start: int = 0) -> int:
    """1-based number of the first line at or after ``start`` matching ``pattern`` (0 when
    none does)."""
    for index in range(start, len(lines)):
        if pattern.search(lines[index]):
            return index + 1
    return 0


def _header_line(lines: list[str], table: str) -> int:
    name = re.escape(table)
    return _line_of(lines, re.compile(rf"^\s*\[\s*{name}\s*\]|^\s*\[\s*\"?{name}\"?\s*\]"))


def _quota(values: Mapping[str, Any], base: TenantQuota) -> TenantQuota:
    changes: dict[str, Any] = {}
    for name in _QUOTA_FIELDS & set(values):
        value = values[name]
        if name != "over_quota" and value == 0:
            value = None  # 0 = unlimited
        if name == "max_program_wall_s" and isinstance(value, int) and value is not None:
            value = float(value)
        changes[name] = value
    return replace(base, **changes)


def load_key_file(path: str | Path, *, secret: str | None = None) -> TenantDirectory:
    """Read a key file (module docstring). Raises :class:`ConfigError` naming the file and the
    line of the first problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read API key file {path}: {exc}") from exc
    tenants, keys = parse_key_file(text, str(path))
    return TenantDirectory(tenants, keys, secret=secret, source=f"key file {path}")


def parse_key_file(text: str, name: str) -> tuple[dict[str, Tenant], dict[str, str]]:
    """Tenants and ``hash -> tenant`` from a key file's text (``name`` in errors)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message ends "(at line N, column M)"
        message = str(exc)
        if "(at end of document)" in message:
            message = message.replace("end of document", f"line {len(text.splitlines())}")
        raise ConfigError(f"API key file {name}: {message}") from exc
    lines = text.splitlines()
    for key in data:
        if key not in ("defaults", "tenants"):
            line = _line_of(lines, re.compile(rf"^\s*\[?\s*{re.escape(key)}\b"))
            raise ConfigError(f"{name}, line {line}: unknown section {key!r} (defaults, tenants)")
    defaults_table = data.get("defaults", {})
    tenants_table = data.get("tenants", {})
    if not isinstance(defaults_table, dict) or not isinstance(tenants_table, dict):
        raise ConfigError(f"{name}: [defaults] and [tenants.<name>] must be tables")
    for key in defaults_table:
        if key not in _QUOTA_FIELDS:
            start = max(0, _header_line(lines, "defaults") - 1)
            line = _line_of(lines, re.compile(rf"^\s*{re.escape(key)}\s*="), start)
            raise ConfigError(f"{name}, line {line}: unknown quota field {key!r}")
    try:
        base = _quota(defaults_table, TenantQuota())
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"{name}, line {_header_line(lines, 'defaults')}: {exc}") from exc
    tenants: dict[str, Tenant] = {}
    keys: dict[str, str] = {}
    for tenant_name, table in tenants_table.items():
        header = _header_line(lines, f"tenants.{tenant_name}")
        where = f"{name}, line {header}"
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: tenants.{tenant_name} must be a table")
        for key in table:
            if key not in _TENANT_FIELDS:
                line = _line_of(lines, re.compile(rf"^\s*{re.escape(key)}\s*="), max(0, header - 1))
                raise ConfigError(f"{name}, line {line}: unknown tenant field {key!r}")
        try:
            tenant = Tenant(
                name=tenant_name,
                weight=float(table.get("weight", 1.0)),
                cache_group=table.get("cache_group"),
                choose_cache_salt=bool(table.get("choose_cache_salt", False)),
                quota=_quota(table, base),
                share_statistics=table.get("share_statistics", False),
            )
        except (ConfigError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: tenant {tenant_name}: {exc}") from exc
        stored = table.get("keys", [])
        if not isinstance(stored, list) or not stored:
            raise ConfigError(f'{where}: tenant {tenant_name} needs keys = ["sha256:..."]')
        for value in stored:
            if not isinstance(value, str) or not _HASH.match(value):
                line = _line_of(lines, re.compile(re.escape(str(value))), max(0, header - 1))
                raise ConfigError(
                    f"{name}, line {line or header}: a key must be stored as sha256:<64 "
                    "lowercase hex digits> (agentrt controller hash-key prints it)"
                )
            if value in keys:
                first = _line_of(lines, re.compile(re.escape(value)))
                line = _line_of(lines, re.compile(re.escape(value)), first)
                raise ConfigError(
                    f"{name}, line {line}: key {value[:15]}... repeated (first at line {first})"
                )
            keys[value] = tenant_name
        tenants[tenant_name] = tenant
    return tenants, keys


def parse_key_list(text: str, what: str) -> dict[str, str]:
    """``tenant=key,tenant=key`` (plain keys or ``sha256:`` hashes) as ``hash -> tenant``.
    Raises :class:`ConfigError` naming ``what`` and the entry's position."""
    keys: dict[str, str] = {}
    for position, item in enumerate((p.strip() for p in text.split(",")), start=1):
        if not item:
            continue
        tenant, sep, key = item.partition("=")
        tenant, key = tenant.strip(), key.strip()
        if not sep or not tenant or not key:
            raise ConfigError(f"{what}, entry {position}: expected tenant=key")
        if not _NAME.match(tenant):
            raise ConfigError(f"{what}, entry {position}: bad tenant name {tenant!r}")
        stored = key if _HASH.match(key) else hash_key(key)
        if stored in keys:
            raise ConfigError(f"{what}, entry {position}: key repeated")
        keys[stored] = tenant
    return keys


def build_directory(
    *,
    key_file: str | None,
    key_list: str | None,
    single_key: str | None,
    secret: str | None = None,
) -> TenantDirectory:
    """The directory from the three sources (module docstring); open mode when all are
    empty. Raises :class:`ConfigError` for a bad source or a key or tenant named twice."""
    tenants: dict[str, Tenant] = {}
    keys: dict[str, str] = {}
    sources: list[str] = []

    def add(more_tenants: Mapping[str, Tenant], more_keys: Mapping[str, str], what: str) -> None:
        for tenant in more_tenants:
            if tenant in tenants:
                raise ConfigError(f"{what}: tenant {tenant!r} is also configured elsewhere")
        for stored in more_keys:
            if stored in keys:
                raise ConfigError(f"{what}: a key of {more_keys[stored]!r} is also a key of "
                                  f"{keys[stored]!r}")  # fmt: skip
        tenants.update(more_tenants)
        keys.update(more_keys)
        sources.append(what)

    if key_file:
        path = Path(key_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read API key file {path}: {exc}") from exc
        add(*parse_key_file(text, str(path)), f"key file {path}")
    if key_list:
        listed = parse_key_list(key_list, "api_keys")
        new = {t: Tenant(t) for t in set(listed.values()) if t not in tenants}
        add(new, listed, "api_keys")
    if single_key:
        stored = {hash_key(single_key): DEFAULT_TENANT}
        new = {} if DEFAULT_TENANT in tenants else {DEFAULT_TENANT: Tenant(DEFAULT_TENANT)}
        add(new, stored, "api_key")
    if not keys:
        return TenantDirectory.open_mode()
    return TenantDirectory(tenants, keys, secret=secret, source=", ".join(sources))
