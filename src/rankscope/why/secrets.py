"""Environment variables that look like secrets, removed before a bundle is written (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping

_SECRET = re.compile(
    r"(TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|COOKIE|SESSION_?KEY|"
    r"SIGNING_?KEY|_KEY$|^KEY$|^AWS_|^AZURE_|^GOOGLE_APPLICATION_CREDENTIALS$|^GCP_|^GH_|^GITHUB_|^HF_|"
    r"^HUGGING_FACE_HUB_TOKEN$|^WANDB_API|^NETRC$|^SSH_AUTH_SOCK$|DATABASE_URL|CONNECTION_STRING|DSN$)",
    re.IGNORECASE,
)
#: Values that hold credentials whatever their name: ``user:password@host`` URLs, private key blocks.
_SECRET_VALUE = re.compile(r"://[^/\s:@]+:[^/\s@]+@|-----BEGIN [A-Z ]*PRIVATE KEY-----")


def looks_secret(name: str, value: str) -> bool:
    return bool(_SECRET.search(name) or _SECRET_VALUE.search(value))


def without_secrets(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The environment with every secret-looking variable removed, and the names removed (sorted)."""
    kept: dict[str, str] = {}
    removed: list[str] = []
    for name, value in environ.items():
        if looks_secret(name, value):
            removed.append(name)
        else:
            kept[name] = value
    return kept, sorted(removed)
