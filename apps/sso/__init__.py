"""Single sign-on: each organization's identity-provider connections (docs/sso.md)."""
