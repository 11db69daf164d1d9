#!/usr/bin/env python3
"""Write hooks/aws/on_demand_prices.json: the on-demand prices nodewarden answers when the Price List API cannot.

The prices come from the Go module of Karpenter's AWS provider, as the Go
module proxy serves it: its pkg/providers/pricing/zz_generated.pricing_aws*.go
files map each region to its instance types' Linux on-demand prices (USD an
hour; CNY in China). The module holds us-east-1, the GovCloud regions and
China; nodewarden answers other regions with us-east-1's.

    scripts/generate_prices.py [--version v1.15.2] [--zip module.zip] [--output hooks/aws/on_demand_prices.json]
"""
from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

MODULE = "github.com/aws/karpenter-provider-aws"
DEFAULT_VERSION = "v1.15.2"
PRICING_FILES = re.compile(r"/pkg/providers/pricing/zz_generated\.pricing_aws[a-z_]*\.go$")
OUTPUT = Path(__file__).resolve().parents[1] / "hooks" / "aws" / "on_demand_prices.json"
DOWNLOAD_TIMEOUT_SECONDS = 120
MAX_ZIP_BYTES = 200 * 1024 * 1024

# `"us-east-1": {` opens a region's map; its entries run to the `},` that closes it.
_REGION = re.compile(r'^\s*"(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)":\s*\{(?P<body>.*?)^\s*\},?\s*$', re.M | re.S)
# `"m5.large": 0.096000,` (several to a line).
_PRICE = re.compile(r'"(?P<type>[a-z0-9][a-z0-9-]*\.[a-z0-9-]+)":\s*(?P<price>\d+(?:\.\d+)?)')
_GENERATED = re.compile(r"^//\s*generated at (\S+)", re.M)


class ParseError(ValueError):
    pass


def parse_go_prices(text: str) -> dict[str, dict[str, float]]:
    """Region -> instance type -> price, from one generated Go file."""
    regions: dict[str, dict[str, float]] = {}
    for block in _REGION.finditer(text):
        prices = {m["type"]: float(m["price"]) for m in _PRICE.finditer(block["body"])}
        if not prices:
            raise ParseError(f"region {block['region']} has no prices")
        if block["region"] in regions:
            raise ParseError(f"region {block['region']} appears twice")
        regions[block["region"]] = prices
    return regions


def generated_at(text: str) -> str | None:
    found = _GENERATED.search(text)
    return found.group(1) if found else None


def go_proxy() -> str:
    """The first module proxy the go tool is configured with (``go env GOPROXY``), not "direct" or "off"."""
    try:
        configured = subprocess.run(["go", "env", "GOPROXY"], capture_output=True, text=True, timeout=30,
                                    check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise SystemExit(f"generate_prices: no module proxy: `go env GOPROXY` failed ({exc}); pass --proxy") from None
    for entry in re.split(r"[,|]", configured.strip()):
        if entry.startswith(("https://", "http://")):
            return entry.rstrip("/")
    raise SystemExit(f"generate_prices: `go env GOPROXY` names no proxy ({configured.strip()!r}); pass --proxy")


def download(version: str, proxy: str) -> bytes:
    url = f"{proxy}/{MODULE}/@v/{version}.zip"
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response:
        data = response.read(MAX_ZIP_BYTES + 1)
    if len(data) > MAX_ZIP_BYTES:
        raise ParseError(f"{url} is larger than {MAX_ZIP_BYTES} bytes")
    return data


def table_from_zip(data: bytes, version: str) -> dict:
    """The bundled table: {"generated", "source", "regions": {region: {type: price}}}, sorted."""
    regions: dict[str, dict[str, float]] = {}
    stamps: list[str] = []
    names: list[str] = []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in sorted(archive.namelist()):
            if not PRICING_FILES.search(name):
                continue
            text = archive.read(name).decode("utf-8")
            names.append(name.rsplit("/", 1)[1])
            if stamp := generated_at(text):
                stamps.append(stamp)
            for region, prices in parse_go_prices(text).items():
                if region in regions:
                    raise ParseError(f"region {region} is in more than one file")
                regions[region] = prices
    if not regions:
        raise ParseError("no pricing files with regions in the module")
    return {
        "generated": max(stamps) if stamps else None,
        "source": f"{MODULE}@{version} pkg/providers/pricing/{{{','.join(names)}}}",
        "regions": {region: dict(sorted(prices.items())) for region, prices in sorted(regions.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=DEFAULT_VERSION, help=f"the module version (default {DEFAULT_VERSION})")
    parser.add_argument("--zip", type=Path, help="a module zip already downloaded, instead of the proxy's")
    parser.add_argument("--proxy", help="the Go module proxy (default: the first `go env GOPROXY` names)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    data = args.zip.read_bytes() if args.zip else download(args.version, args.proxy or go_proxy())
    table = table_from_zip(data, args.version)
    args.output.write_text(json.dumps(table, indent=1) + "\n")
    count = sum(len(p) for p in table["regions"].values())
    print(f"{args.output}: {count} prices in {len(table['regions'])} regions ({', '.join(table['regions'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
