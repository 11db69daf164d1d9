"""scripts/generate_prices.py: the bundled on-demand table from the Go pricing files of a module zip (built here)."""
from __future__ import annotations

import importlib.util
import io
import json
import pathlib
import zipfile

import pytest

ROOT = pathlib.Path(__file__).parents[2]
_spec = importlib.util.spec_from_file_location("generate_prices", ROOT / "scripts" / "generate_prices.py")
generate_prices = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate_prices)

COMMERCIAL = '''package pricing

// generated at 2026-08-24T13:29:56Z for us-east-1

var InitialOnDemandPricesAWS = map[string]map[ec2types.InstanceType]float64{
	// us-east-1
	"us-east-1": {
		// m5 family
		"m5.large": 0.096000, "m5.xlarge": 0.192000,
		"m5.metal": 4.608000,
		// u-12tb1 family
		"u-12tb1.112xlarge": 109.200000,
	},
}
'''
GOV = '''package pricing

// generated at 2026-07-01T00:00:00Z for us-east-1

var InitialOnDemandPricesUSGov = map[string]map[ec2types.InstanceType]float64{
	// us-gov-east-1
	"us-gov-east-1": {
		"c5.large": 0.102000,
	},

	// us-gov-west-1
	"us-gov-west-1": {
		"c1.medium": 0.157000, "c5.large": 0.1,
	},
}
'''
PREFIX = "github.com/aws/karpenter-provider-aws@v9.9.9/pkg/providers/pricing/"


def module_zip(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def test_regions_and_prices_from_the_go_maps():
    table = generate_prices.table_from_zip(module_zip({
        PREFIX + "zz_generated.pricing_aws.go": COMMERCIAL, PREFIX + "zz_generated.pricing_aws_us_gov.go": GOV,
        PREFIX + "pricing.go": '"eu-west-1": {\n"m5.large": 1.0,\n},\n',  # not a generated table: ignored
    }), "v9.9.9")
    assert table["regions"] == {
        "us-east-1": {"m5.large": 0.096, "m5.metal": 4.608, "m5.xlarge": 0.192, "u-12tb1.112xlarge": 109.2},
        "us-gov-east-1": {"c5.large": 0.102},
        "us-gov-west-1": {"c1.medium": 0.157, "c5.large": 0.1},
    }
    assert table["generated"] == "2026-08-24T13:29:56Z", "the newest of the files' stamps"
    assert "karpenter-provider-aws@v9.9.9" in table["source"]


def test_the_script_writes_sorted_json(tmp_path):
    archive = tmp_path / "module.zip"
    archive.write_bytes(module_zip({PREFIX + "zz_generated.pricing_aws.go": COMMERCIAL}))
    output = tmp_path / "prices.json"
    assert generate_prices.main(["--zip", str(archive), "--output", str(output), "--version", "v9.9.9"]) == 0
    written = json.loads(output.read_text())
    assert list(written["regions"]["us-east-1"]) == sorted(written["regions"]["us-east-1"])


@pytest.mark.parametrize("files, error", [
    ({PREFIX + "README.md": "nothing"}, "no pricing files"),
    ({PREFIX + "zz_generated.pricing_aws.go": '"us-east-1": {\n},\n'}, "has no prices"),
    ({PREFIX + "zz_generated.pricing_aws.go": COMMERCIAL, PREFIX + "zz_generated.pricing_aws_x.go": COMMERCIAL},
     "more than one file"),
])
def test_a_module_without_usable_tables_is_refused(files, error):
    with pytest.raises(generate_prices.ParseError, match=error):
        generate_prices.table_from_zip(module_zip(files), "v9.9.9")
