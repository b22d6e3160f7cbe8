"""Idempotency keys: the ones a caller chooses, which the database keeps unique, and the ones
Tenure generates for every other job, which need no such check.

A generated key is a random UUID of version 8 (RFC 9562's version for an application's own
layout), whatever made it: the client, or the database's default for a job inserted without a
key. The unique index on keys leaves version 8 out, so a job whose key nobody chose writes no
entry there at its enqueue, its claim or its completion (each transition of a job writes a new
row version, and every index that admits the version gets an entry for it). Random keys need no
index to stay apart: 122 random bits, as a version 4 UUID has. A caller's own key is any other
UUID, or a string (a version 5 UUID of it)."""

from __future__ import annotations

import os
import uuid

#: The version a generated key has, and a caller's may not.
GENERATED_VERSION = 8
_VERSION_MASK = 0xF << 76
_VERSION_BITS = GENERATED_VERSION << 76
_VARIANT_MASK = 0xC << 60
_VARIANT_BITS = 0x8 << 60  # RFC 9562's variant, 10xx


def generated_key() -> uuid.UUID:
    """A new random key of version 8, for a job whose caller gave none."""
    bits = int.from_bytes(os.urandom(16), "big")
    return uuid.UUID(int=(bits & ~_VERSION_MASK & ~_VARIANT_MASK) | _VERSION_BITS | _VARIANT_BITS)


def is_generated(key: uuid.UUID) -> bool:
    """Whether `key` has the form of a generated key (version 8), which the unique index skips."""
    return key.version == GENERATED_VERSION
