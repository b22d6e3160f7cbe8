"""A web dashboard over a Tenure schema: see every queue and job, and act on them."""

from tenure.ops.dashboard.app import create_app
from tenure.ops.dashboard.security import Authenticator, is_loopback_host, token_auth

__all__ = ["Authenticator", "create_app", "is_loopback_host", "token_auth"]
