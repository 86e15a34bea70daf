#!/bin/sh
# An offline bundle: swarm-tui and every dependency as wheels for this platform and Python,
# plus the installer, in one tarball — for bastions with no route to a package index.
#
#   sh scripts/offline_bundle.sh [OUT_DIR]        (default: dist/swarm-tui-offline)
#   # on the bastion:
#   tar xzf swarm-tui-offline.tar.gz && sh swarm-tui-offline/install.sh [VENV_DIR]
#
# Build it on the same OS, CPU architecture and Python minor version as the bastion
# (wheels such as uvloop, psycopg-binary and httptools are compiled per platform).
set -eu
out=${1:-dist/swarm-tui-offline}
rm -rf "$out" "$out.tar.gz"
mkdir -p "$out/wheels"
python3 -m pip wheel --quiet --wheel-dir "$out/wheels" "$(dirname "$0")/.."
cat > "$out/install.sh" <<'INSTALL'
#!/bin/sh
# Installs swarm-tui from the wheels beside this script; never reaches a package index.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:-${XDG_DATA_HOME:-$HOME/.local/share}/swarm-tui/venv}
python3 -m venv "$venv"
PIP_NO_INDEX=1 "$venv/bin/pip" install --quiet --no-index --find-links "$here/wheels" swarm-tui
echo "installed: $venv/bin/swarm-tui (put it on PATH, or: ln -s $venv/bin/swarm-tui ~/.local/bin/)"
INSTALL
chmod +x "$out/install.sh"
tar czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
echo "$out.tar.gz: $(ls "$out/wheels" | wc -l) wheels, $(du -h "$out.tar.gz" | cut -f1)"
