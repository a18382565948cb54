"""An embedded OpenID provider speaking the Keycloak and authentik APIs, for the demo and tests.

For development and tests only: weak default credentials, state in memory or a JSON file.
"""

from .app import BANNER, create_app
from .settings import DevIdpSettings

__all__ = ["BANNER", "DevIdpSettings", "create_app"]
