"""The shared input checks of placement.model.numbers and placement.model.text: numbers, counts, prices, the YAML
loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from placement.errors import InputError, shown
from placement.model.numbers import finite_number, non_negative_price, positive_int

NON_FINITE = ["inf", "Infinity", "-inf", "1e999", "nan", "NaN", float("inf"), float("nan"), 10**400]


@pytest.mark.parametrize("value", NON_FINITE)
def test_non_finite_numbers_are_refused_naming_the_field(value: object) -> None:
    with pytest.raises(InputError) as err:
        finite_number(value, "Price (line 3)", source="x.csv")
    assert str(err.value).startswith("x.csv: Price (line 3): must be")


@pytest.mark.parametrize("value", [True, False, None, "", " ", "abc", [1], {"a": 1}])
def test_non_numbers_and_booleans_are_refused(value: object) -> None:
    with pytest.raises(InputError, match="must be"):
        finite_number(value, "limit")


@pytest.mark.parametrize("value", [0, "0", -8, "-8", 0.5, "0.5", 1e300, True, "inf"])
def test_counts_are_positive_whole_numbers(value: object) -> None:
    with pytest.raises(InputError):
        positive_int(value, "AcceleratorCount")


@pytest.mark.parametrize(("value", "expected"), [(8, 8), (8.0, 8), ("8", 8), (" 16 ", 16), ("8.0", 8)])
def test_counts_accept_whole_numbers_in_any_spelling(value: object, expected: int) -> None:
    assert positive_int(value, "gpus") == expected


@pytest.mark.parametrize("value", [-0.01, "-1", "inf", "nan"])
def test_prices_are_finite_and_not_negative(value: object) -> None:
    with pytest.raises(InputError):
        non_negative_price(value, "SpotPrice")


def test_prices_accept_zero_and_strings() -> None:
    assert non_negative_price("0", "Price") == 0.0
    assert non_negative_price("12.5", "Price") == 12.5
    assert str(non_negative_price("-0", "Price")) == "0.0"


def test_values_quoted_in_errors_are_cut_short() -> None:
    with pytest.raises(InputError) as err:
        finite_number("x" * 1_000_000, "gpus")
    assert len(str(err.value)) < 120
    assert shown("y" * 500).endswith("...")


# ----------------------------------------------------------------------------- the YAML loader

from placement.errors import UsageError  # noqa: E402
from placement.files.readers import load_yaml  # noqa: E402
from placement.model.text import MAX_YAML_DEPTH  # noqa: E402


def _load(tmp_path, text: str):
    path = tmp_path / "f.yaml"
    path.write_text(text)
    return load_yaml(str(path), "job spec")


def test_duplicate_keys_are_refused_with_both_lines(tmp_path):
    with pytest.raises(UsageError, match=r"key 'gpus' is given twice \(lines 2 and 3\)"):
        _load(tmp_path, "name: a\ngpus: 8\ngpus: 800\n")
    with pytest.raises(UsageError, match="given twice"):
        _load(tmp_path, "jobs:\n  - {name: a, name: b}\n")


def test_merge_keys_may_be_overridden(tmp_path):
    doc = _load(tmp_path, "base: &b {gpus: 8, hours: 1}\njob: {<<: *b, gpus: 16}\n")
    assert doc["job"] == {"gpus": 16, "hours": 1}


def test_alias_bombs_are_refused_quickly_without_expanding(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10^9 values, 400 bytes
    with pytest.raises(UsageError) as err:
        _load(tmp_path, "\n".join(lines) + "\n")
    assert "expands to more than" in str(err.value) and len(str(err.value)) < 200


def test_a_recursive_alias_is_refused(tmp_path):
    with pytest.raises(UsageError, match="refers to a value that contains it"):
        _load(tmp_path, "a: &a [1, *a]\n")


def test_shared_values_a_yaml_dumper_writes_are_read(tmp_path):
    import yaml

    shared = {"dataset": {"uri": "s3://b/d"}}
    text = yaml.safe_dump({"jobs": [{"data": shared}, {"data": shared}]})
    assert "&id" in text
    assert _load(tmp_path, text)["jobs"][1]["data"] == shared


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "".join(" " * i + "k:\n" for i in range(1000))])
def test_deep_nesting_is_refused_before_the_c_loader_sees_it(tmp_path, text):
    # In a child process: before the depth cap, the C loader crashed the interpreter (SIGSEGV). The promise
    # holds whichever layer refuses first: our token pre-scan, or PyYAML itself (6.0.4 has its own depth limit
    # and message), so this asserts the promise, not either one's wording.
    import subprocess
    import sys
    import time

    path = tmp_path / "deep.yaml"
    path.write_text(text)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "placement", "plan", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert time.monotonic() - start < 60  # bounded: refused from the text, never a runaway parse
    assert proc.returncode == 2, proc.stderr[-300:]
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("placement: error: job spec: ") and proc.stderr.count("\n") == 1


def test_nesting_past_the_cap_is_refused_by_the_pre_scan(tmp_path):
    # Below any PyYAML limit, so our own check answers, naming the cap and the line.
    deep = "x:\n  - " + "[" * MAX_YAML_DEPTH + "]" * MAX_YAML_DEPTH + "\n"
    with pytest.raises(UsageError, match=f"nested more than {MAX_YAML_DEPTH} levels deep at line 2"):
        _load(tmp_path, deep)
    assert _load(tmp_path, "[" * MAX_YAML_DEPTH + "]" * MAX_YAML_DEPTH + "\n") is not None


def test_files_over_the_size_cap_are_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    with path.open("wb") as fh:
        fh.truncate(64 * 2**20)  # sparse: no disk used
    with pytest.raises(UsageError, match="MiB"):
        load_yaml(str(path), "job spec")


@pytest.mark.parametrize("make", [
    lambda p: str(p),  # a directory
    lambda p: str(p / "f.txt" / "x.yaml"),  # under a file: ENOTDIR
    lambda p: str(p / ("n" * 5000)),  # ENAMETOOLONG
    lambda p: str(p / "nul\0.yaml"),  # ValueError from open
])
def test_odd_paths_are_one_line_usage_errors(tmp_path, make):
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(UsageError) as err:
        load_yaml(make(tmp_path), "job spec")
    assert str(err.value).startswith("job spec: ") and len(str(err.value)) < 200


# ----------------------------------------------------------------------------- messages a first week meets


@pytest.mark.parametrize(("text", "line", "column"), [
    ("name: a\n\tgpus: 8\n", 2, 1),  # the C loader: "a tab character that violates indentation"
    ("name: a\ndata:\n\tdataset: x\n", 3, 1),  # "found character that cannot start any token"
    ("jobs:\n  - a\n  -\tb\n", 3, 4),
])
def test_a_tab_is_named_as_a_tab(tmp_path, text, line, column):
    with pytest.raises(UsageError) as err:
        _load(tmp_path, text)
    message = str(err.value)
    assert f"line {line} column {column} has a tab character" in message and "spaces" in message
    assert "\n" not in message and "\\t" not in message


@pytest.mark.parametrize(("text", "line"), [('name: "abc\ngpus: 8\n', 1), ("name: a\nhours: 'ten\n", 2),
                                            ('name: "abc', 1)])
def test_an_unterminated_quote_is_named_where_it_opens(tmp_path, text, line):
    with pytest.raises(UsageError) as err:
        _load(tmp_path, text)
    assert f"the quote opened at line {line} column" in str(err.value) and "never closed" in str(err.value)


def test_other_syntax_errors_keep_their_line(tmp_path):
    with pytest.raises(UsageError, match=r"is not valid YAML at line 2 .*; fix the syntax"):
        _load(tmp_path, "a: [1, 2\n")


@pytest.mark.parametrize("name", ["q.yaml", "q.YAML", "q.Yml"])
def test_a_quota_file_named_yaml_in_any_case_is_read_as_yaml(tmp_path, name):
    from placement.files.inputs import load_quotas

    path = tmp_path / name
    path.write_text("- {cloud: aws, region: us-east-1, quota: L-417A185B, limit: 384, usage: 0}\n")
    assert load_quotas(str(path)).get("aws", "us-east-1", "L-417A185B").limit == 384


@pytest.mark.parametrize(("text", "hint"), [("1e3", "1.0e+3"), ("1.0e3", "1.0e+3"), ("2E-4", "2.0e-4"),
                                            (".5e3", "0.5e+3"), ("-3e10", "-3.0e+10"), ("8", "8"),
                                            ("1.5", "1.5"), ("abc", None), ("1e999", None), ("nan", None)])
def test_number_hints_are_forms_yaml_1_1_reads_as_numbers(text, hint):
    import yaml

    from placement.model.numbers import yaml_number

    assert yaml_number(text) == hint
    if hint is not None:
        assert yaml.safe_load(f"x: {hint}")["x"] == float(text)


@pytest.mark.parametrize(("value", "hint"), [("1e3", "write it as 1.0e+3, unquoted (in YAML an exponent needs"),
                                             ("1.0e3", "write it as 1.0e+3, unquoted"),
                                             ("'8'", "write it as 8, unquoted")])
def test_a_job_spec_number_read_as_text_names_the_form_to_write(tmp_path, value, hint):
    from placement.model.jobspec import parse_job

    doc = _load(tmp_path, f"name: a\naccelerator: H100\ngpus: 8\nhours: {value}\n")
    with pytest.raises(InputError) as err:
        parse_job(doc)
    assert hint in str(err.value)


# --catalog for every cloud: the default catalog is not read (issue 33: a plan over the user's CSVs alone).
from placement.files.inputs import load_catalog  # noqa: E402

CSV_HEAD = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"


def _catalogs(tmp_path):
    aws, gcp = tmp_path / "aws.csv", tmp_path / "gcp.csv"
    aws.write_text(CSV_HEAD + "p5.48xlarge,H100,8,192,2048,55.04,9.37,us-east-1,use1-az1\n")
    gcp.write_text(CSV_HEAD + "a3-highgpu-8g,H100,8,208,1872,88.49,,us-central1,us-central1-a\n")
    return f"aws={aws}", f"gcp={gcp}"


def test_every_cloud_given_the_default_catalog_is_not_read(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (data / "catalog.json").write_text("{ not json")  # a refreshed catalog that fails when read
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(data))
    aws, gcp = _catalogs(tmp_path)
    catalog = load_catalog([aws, gcp])
    assert sorted((o.cloud, o.instance_type) for o in catalog.offers) == [("aws", "p5.48xlarge"),
                                                                          ("gcp", "a3-highgpu-8g")]
    assert [o.cloud for o in catalog.provenance()] == ["aws", "gcp"]
    with pytest.raises(InputError, match="refreshed catalog"):  # one cloud kept from it: read, and refused
        load_catalog([aws])


def test_every_cloud_given_the_same_catalog_as_merging_over_the_default(tmp_path):
    from placement.files.catalog_cache import parse_cached
    from placement.files.inputs import modified
    from placement.model.catalog import default_catalog

    merged = default_catalog()  # what load_catalog built before: the default, each cloud replaced in turn
    for spec in _catalogs(tmp_path):
        cloud, _, path = spec.partition("=")
        text = Path(path).read_text(encoding="utf-8")
        merged = merged.merged(parse_cached(text, cloud, source=path, modified=modified(path)), [cloud])
    got = load_catalog(_catalogs(tmp_path))
    assert (got.offers, got.as_of, got.source, got.provenance()) == (merged.offers, merged.as_of, merged.source,
                                                                     merged.provenance())


def test_a_plan_over_small_csvs_for_every_cloud_loads_no_default_catalog_and_no_hashes(tmp_path):
    """The start-up of `placement plan --catalog aws=... --catalog gcp=...` (issue 33): neither the embedded catalog
    nor, for CSVs under the cache's MIN_BYTES, the cache's hashing (OpenSSL) or temporary-file modules."""
    import subprocess
    import sys

    code = ("import sys; from placement.files.inputs import load_catalog; load_catalog(sys.argv[1:]); "
            "from placement.model.catalog import embedded_catalog; "
            "print(embedded_catalog.cache_info().currsize, 'hashlib' in sys.modules, 'tempfile' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, *_catalogs(tmp_path)], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split() == ["0", "False", "False"]
