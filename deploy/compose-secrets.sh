#!/usr/bin/env bash
# Makes the secrets deploy/compose.yaml reads, one file each, in a directory of their own:
#
#   deploy/compose-secrets.sh [DIR]      DIR: $GATEWAY_SECRETS_DIR, else deploy/secrets
#
# secret_key, encryption_keys (a Fernet key), postgres_password, database_url (built from that
# password) and admin_password (the first owner's, used by `migrate` on the first start only). A file
# that exists is kept, never overwritten: running this again is safe, and a secret you put there
# yourself is used as it is. Keep the directory out of version control, and back it up: the encryption
# keys decrypt the provider keys and the spool, and postgres_password is set in the database when its
# volume is first made (changing the file later does not change it).
#
# Permissions: the directory is 0700 (only its owner can reach the files on this host), the files
# 0644 inside it. Compose (Docker's, and podman-compose) bind-mounts each file at /run/secrets/<name>
# with the host file's owner and mode, and the containers read them as their own users (the gateway
# as uid 10001; with rootless podman or userns-remap those are mapped ids no chown here could name):
# readable by all is what lets them, and the 0700 directory is what keeps this host's other users out.
#
# Needs python3 (standard library only) for the random values.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
directory=${1:-${GATEWAY_SECRETS_DIR:-$here/secrets}}
email=${GATEWAY_ADMIN_EMAIL:-admin@example.com}

if ! command -v python3 >/dev/null; then
    echo "compose-secrets: python3 is needed to generate the secrets" >&2
    exit 1
fi

umask 077
mkdir -p "$directory"
chmod 0700 "$directory"

# secret NAME PYTHON: the file NAME from what PYTHON prints (given the directory), unless it exists.
# Written aside, then linked into place (a link never replaces an existing file), so a run cut short
# leaves no half a secret.
secret() {
    local name=$1 code=$2 path="$directory/$1" draft
    if [[ -e $path ]]; then
        echo "kept      $path"
        return
    fi
    draft=$(mktemp "$directory/.$name.XXXXXX")
    if ! python3 -c "$code" "$directory" >"$draft"; then
        rm -f "$draft"
        exit 1
    fi
    chmod 0644 "$draft"
    if ln "$draft" "$path" 2>/dev/null; then
        echo "generated $path"
    else
        echo "kept      $path"
    fi
    rm -f "$draft"
}

secret secret_key 'import secrets; print(secrets.token_urlsafe(50))'
# What cryptography's Fernet.generate_key() returns, without needing the package here.
secret encryption_keys 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())'
secret postgres_password 'import secrets; print(secrets.token_urlsafe(32))'
# From the password file as it is now (yours, if you wrote it), quoted for a URL.
secret database_url 'import pathlib, sys, urllib.parse
password = (pathlib.Path(sys.argv[1]) / "postgres_password").read_text().rstrip("\r\n")
print("postgres://gateway:" + urllib.parse.quote(password, safe="") + "@postgres:5432/gateway")'
secret admin_password 'import secrets; print(secrets.token_urlsafe(18))'

cat <<EOF

The first owner, made by \`migrate\` on the first start when the database has no organization:
  email:    $email   (GATEWAY_ADMIN_EMAIL when you run compose)
  password: in $directory/admin_password
Sign in at the balancer (/console/, or POST /api/v1/auth/login) and change it.
Use this directory with: GATEWAY_SECRETS_DIR=$directory
EOF
