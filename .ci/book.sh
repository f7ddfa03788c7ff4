#!/usr/bin/env bash
# The book: build docs/ with mdBook into docs/book/ and check that every
# relative link and image in the rendered pages resolves to a file of the
# book. mdbook is installed with cargo when missing (bounded: a CI run
# must not wait on it for long). MDBOOK=path uses another binary.
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION=0.5.4
mdbook="${MDBOOK:-$(command -v mdbook || true)}"
if [ -z "$mdbook" ]; then
  root="${CARGO_HOME:-$HOME/.cargo}"
  # --no-default-features: no live-reload server and no search index
  # builder, about half the crates to compile.
  timeout 900 cargo install --quiet --locked --no-default-features \
    --version "$MDBOOK_VERSION" mdbook --root "$root"
  mdbook="$root/bin/mdbook"
fi
"$mdbook" --version
"$mdbook" build docs

python3 - docs/book <<'PY'
import html.parser, os, sys, urllib.parse
book = sys.argv[1]
bad, checked = [], 0
class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.found = []
    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("href", "src") and v:
                self.found.append(v)
for dirpath, _, files in os.walk(book):
    for f in files:
        if not f.endswith(".html"):
            continue
        page = os.path.join(dirpath, f)
        p = Links()
        p.feed(open(page, encoding="utf-8").read())
        for link in p.found:
            u = urllib.parse.urlparse(link)
            if u.scheme or u.netloc or link.startswith("#") or link.startswith("javascript:"):
                continue
            target = os.path.normpath(os.path.join(dirpath, urllib.parse.unquote(u.path)))
            checked += 1
            if not os.path.exists(target):
                bad.append(f"{os.path.relpath(page, book)}: {link}")
if bad:
    print("book: broken links:\n  " + "\n  ".join(sorted(set(bad))), file=sys.stderr)
    sys.exit(1)
print(f"book: {checked} relative links resolve")
PY
