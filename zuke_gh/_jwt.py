"""The GitHub App JWT: RS256 over ``{iat, exp, iss}``, signed with the App's private key.

``cryptography`` is imported inside the functions, so ``import zuke_gh`` (and
``import zuke``) never loads it; only an App that signs does. Key problems get
named :class:`~zuke_gh.errors.GitHubAppKeyError` messages that never quote the
key, and are raised outside ``except`` blocks so no library error that might
carry key material rides along in the exception chain.
"""

from __future__ import annotations

import base64
import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from zuke_gh.errors import GitHubAppKeyError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

#: GitHub allows a JWT ten minutes; these are its documented choices (and the original's).
BACKDATE_S = 60
LIFETIME_S = 540


def _key_text(key: str | Path) -> str:
    if isinstance(key, Path):
        problem = ""
        try:
            text = key.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problem = getattr(exc, "strerror", None) or type(exc).__name__
        if problem:
            raise GitHubAppKeyError(
                f"could not read the GitHub App private key file {str(key)!r}: {problem}. "
                "Check ZUKE_GH_APP_PRIVATE_KEY_FILE."
            )
        return text
    return key


def load_private_key(key: str | Path) -> RSAPrivateKey:
    """The RSA key from PEM text (PKCS#1 or PKCS#8) or a PEM file."""
    text = _key_text(key).strip()
    if "\n" not in text and "\\n" in text:
        text = text.replace("\\n", "\n")  # a PEM pasted into one environment variable
    if not text:
        raise GitHubAppKeyError(
            "the GitHub App private key is empty: paste the PEM file's contents "
            "(ZUKE_GH_APP_PRIVATE_KEY) or name the file (ZUKE_GH_APP_PRIVATE_KEY_FILE)."
        )
    if "-----BEGIN" not in text:
        raise GitHubAppKeyError(
            "the GitHub App private key is not PEM: expected '-----BEGIN RSA PRIVATE KEY-----' "
            "or '-----BEGIN PRIVATE KEY-----' (the .pem file GitHub gave you)."
        )
    if "ENCRYPTED" in text:
        raise GitHubAppKeyError(
            "the GitHub App private key is encrypted: use the unencrypted .pem GitHub gave you."
        )
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    loaded = None
    with contextlib.suppress(ValueError, TypeError, UnsupportedAlgorithm):
        loaded = load_pem_private_key(text.encode("ascii", "replace"), password=None)
    if loaded is None:
        raise GitHubAppKeyError(
            "the GitHub App private key could not be read: the PEM is damaged (not base64, "
            "or cut short). Download a fresh key from the App's settings."
        )
    if not isinstance(loaded, RSAPrivateKey):
        raise GitHubAppKeyError(
            "the GitHub App private key is not an RSA key: GitHub Apps sign with RSA."
        )
    return loaded


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def app_jwt(app_id: str | int, key: RSAPrivateKey | str | Path, now_ms: int) -> str:
    """A JWT for ``app_id``: ``iat = now - 60 s``, ``exp = iat + 540 s``, ``iss = app_id``."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    private = load_private_key(key) if isinstance(key, str | Path) else key
    issued = now_ms // 1000 - BACKDATE_S
    header = {"alg": "RS256", "typ": "JWT"}
    claims = {"iat": issued, "exp": issued + LIFETIME_S, "iss": str(app_id)}
    signing_input = ".".join(
        _b64(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    signature = None
    with contextlib.suppress(ValueError, TypeError, UnsupportedAlgorithm, AttributeError):
        signature = private.sign(signing_input.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
    if not isinstance(signature, bytes):  # a key too small for RS256, or not a private key
        raise GitHubAppKeyError(
            "the GitHub App private key cannot sign an RS256 JWT (too small, or not an RSA "
            "private key). Download a fresh key from the App's settings."
        )
    return f"{signing_input}.{_b64(signature)}"
