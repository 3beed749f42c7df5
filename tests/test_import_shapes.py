"""`k3 import` on the exports teams really hand over, each written here in its exact real shape (columns, nesting,
literals such as FOCUS's `NULL`), never copied from a published file: FOCUS 1.0/1.1/1.2 as CSV, gzip CSV and Parquet
with ChargeCategory read fully; legacy CUR (slash headers, Parquet's flattened names); GCP's BigQuery CSV with dotted
headers and JSON with `credits[]`; Jira REST worklogs keyed by issue id, issue JSON with its worklogs, Tempo v4;
OpenAI Batch output, Anthropic Message Batch results, LiteLLM spend logs, single objects; a single PagerDuty
incident and Opsgenie services by name. Each either reads right or is refused in one line with exit 2, and no
importer exits 0 with nothing mapped. docs/imports.md lists each shape with its test here."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import json
from pathlib import Path

import pytest

from k3lib.cli.main import main
from k3lib.renewal.inputs import read_costs
from k3lib.core.errors import BadInputError
from k3lib.renewal.imports import commands
from k3lib.renewal.imports.columnar import canonical
from k3lib.renewal.imports.params import ImportSection
from k3lib.renewal.imports.provenance import MARK, ReviewWindow
from k3lib.renewal.inputs import read_costs, read_hours, read_incidents

DATA = Path(__file__).parent / "data" / "exports"
WINDOW = ReviewWindow(dt.datetime(2026, 7, 24, tzinfo=dt.timezone.utc), dt.datetime(2026, 8, 14, tzinfo=dt.timezone.utc))
WINDOW_ARG = "2026-07-24T00:00:00Z/2026-08-14T00:00:00Z"
STEADY_ITEMS = {"capacity": 21000.0, "storage": 600.0, "network": 350.0, "monitoring": 400.0}
USD = [{"from": "USD", "rate": 0.8, "date": "2026-08-14", "source": "test rate"}]
K3 = {"tags": {"app": "kimi-k3"}}


def _section(**imports) -> ImportSection:
    return ImportSection.model_validate(imports)


def _items(path: Path) -> dict[str, float | None]:
    got = read_costs(path)
    return {k: getattr(got, k) for k in STEADY_ITEMS}


def _meta(path: Path) -> dict:
    line = next(x for x in path.read_text().splitlines() if x.startswith(MARK))
    return json.loads(line[len(MARK):])


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerows([header, *rows])
    data = buf.getvalue().encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def _cli_one_line(capsys, args: list[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# --- FOCUS 1.0 / 1.1 / 1.2 -------------------------------------------------------------------------------------------

FOCUS_10 = ["BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
            "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
            "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory", "CommitmentDiscountId",
            "CommitmentDiscountName", "CommitmentDiscountStatus", "CommitmentDiscountType", "ConsumedQuantity",
            "ConsumedUnit", "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "InvoiceIssuerName", "ListCost",
            "ListUnitPrice", "PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName",
            "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName",
            "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags"]
FOCUS_11 = [*FOCUS_10, "CapacityReservationId", "CapacityReservationStatus", "CommitmentDiscountQuantity",
            "CommitmentDiscountUnit", "ServiceSubcategory", "SkuMeter", "SkuPriceDetails"]
FOCUS_12 = [*FOCUS_11, "BillingAccountType", "InvoiceId", "PricingCurrency", "PricingCurrencyContractedUnitPrice",
            "PricingCurrencyEffectiveCost", "PricingCurrencyListUnitPrice", "SubAccountType"]
FOCUS_VERSIONS = {"1.0": FOCUS_10, "1.1": FOCUS_11, "1.2": FOCUS_12}
K3_TAGS = '{"app": "kimi-k3", "env": "prod"}'


def focus_rows(version: str) -> list[dict[str, str]]:
    """The steady bill (tests/data/exports/focus.csv) in a FOCUS version's columns, every empty cell the literal
    NULL, plus a credit, an adjustment and a correction of the deployment that are listed apart."""
    rows = [dict(r) for r in csv.DictReader((DATA / "focus.csv").open())]
    for r in rows:
        r["ChargeClass"] = ""
        if version == "1.0" and r["ServiceSubcategory"] == "Support":
            r["ServiceCategory"] = "Other"  # 1.0 has no ServiceSubcategory to tell support from observability
    base = next(r for r in rows if r["ServiceCategory"] == "Compute" and r["ChargeCategory"] == "Usage")
    period = {"ChargePeriodStart": "2026-08-01T00:00:00Z", "ChargePeriodEnd": "2026-08-02T00:00:00Z"}
    rows += [{**base, **period, "ChargeCategory": "Credit", "BilledCost": "-500", "EffectiveCost": "-500",
              "CommitmentDiscountId": ""},
             {**base, **period, "ChargeCategory": "Adjustment", "BilledCost": "-120", "EffectiveCost": "-120",
              "CommitmentDiscountId": ""},
             {**base, **period, "ChargeClass": "Correction", "BilledCost": "75", "EffectiveCost": "75",
              "CommitmentDiscountId": ""}]
    columns = FOCUS_VERSIONS[version]
    return [{c: (r.get(c) or "NULL") for c in columns} for r in rows]


def _focus_file(tmp_path: Path, version: str, container: str) -> Path:
    rows = focus_rows(version)
    columns = FOCUS_VERSIONS[version]
    if container != "parquet":
        return _write_csv(tmp_path / f"focus-{version}.{container}", columns, [[r[c] for c in columns] for r in rows])
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    ts = pa.timestamp("ms", tz="UTC")
    parse = lambda v: None if v == "NULL" else dt.datetime.fromisoformat(v.replace("Z", "+00:00"))  # noqa: E731
    num = lambda v: None if v == "NULL" else float(v)  # noqa: E731
    data = {}
    for c in columns:
        values = [r[c] for r in rows]
        if c in ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"):
            data[c] = pa.array([parse(v) for v in values], ts)
        elif c.endswith(("Cost", "Price", "Quantity")):
            data[c] = pa.array([num(v) for v in values], pa.float64())
        elif c == "Tags":
            data[c] = pa.array([None if v == "NULL" else list(json.loads(v).items()) for v in values],
                               pa.map_(pa.string(), pa.string()))
        else:
            data[c] = pa.array([None if v == "NULL" else v for v in values], pa.string())
    pq.write_table(pa.table(data), tmp_path / f"focus-{version}.parquet")
    return tmp_path / f"focus-{version}.parquet"


@pytest.mark.parametrize("container", ["csv", "csv.gz", "parquet"])
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_focus_null_literals_blank_and_credits_listed_apart(tmp_path, version, container):
    path = _focus_file(tmp_path, version, container)
    out = tmp_path / "costs.yaml"
    lines = commands.import_bill("focus", path, out, _section(currency="EUR", costs=K3), WINDOW)
    assert _items(out) == STEADY_ITEMS, lines  # the credit, adjustment and correction are not netted
    credits = {(c["category"], c["amount"]) for c in _meta(out)["credits"]}
    assert credits == {("credit", -500.0), ("adjustment", -120.0), ("correction", 75.0)}
    assert any("listed apart (credit, never netted into an item): Virtual Machines -500.00 EUR" in x for x in lines)
    # the review reads them as costs.yaml credits: listed, not netted (neither recurring nor accepted), and a
    # re-import of the same file replaces its own entries rather than adding them twice
    review_credits = read_costs(out).credits
    assert sorted(c.amount for c in review_credits) == [-500.0, -120.0, 75.0]
    assert not any(c.netted for c in review_credits)
    commands.import_bill("focus", path, out, _section(currency="EUR", costs=K3), WINDOW)
    assert len(read_costs(out).credits) == 3


def test_focus_an_unknown_charge_category_is_one_line(tmp_path, capsys):
    rows = focus_rows("1.2")
    rows[0]["ChargeCategory"] = "Rebate"
    path = _write_csv(tmp_path / "f.csv", FOCUS_12, [[r[c] for c in FOCUS_12] for r in rows])
    err = _cli_one_line(capsys, ["import", "focus", str(path), "--out", str(tmp_path / "c.yaml"), "--window",
                                 WINDOW_ARG, "--tag", "app=kimi-k3"])
    assert "line 2, column ChargeCategory: expected Usage, Purchase, Tax, Credit or Adjustment (got 'Rebate')" in err


# --- AWS CUR: legacy headers mapped to CUR 2.0 ------------------------------------------------------------------------

LEGACY = {"identity_line_item_id": "identity/LineItemId", "line_item_usage_start_date": "lineItem/UsageStartDate",
          "line_item_usage_end_date": "lineItem/UsageEndDate", "line_item_line_item_type": "lineItem/LineItemType",
          "line_item_product_code": "lineItem/ProductCode", "line_item_usage_type": "lineItem/UsageType",
          "product_product_family": "product/productFamily", "line_item_resource_id": "lineItem/ResourceId",
          "line_item_unblended_cost": "lineItem/UnblendedCost", "line_item_currency_code": "lineItem/CurrencyCode",
          "savings_plan_savings_plan_effective_cost": "savingsPlan/SavingsPlanEffectiveCost",
          "savings_plan_total_commitment_to_date": "savingsPlan/TotalCommitmentToDate",
          "savings_plan_used_commitment": "savingsPlan/UsedCommitment",
          "savings_plan_savings_plan_a_r_n": "savingsPlan/SavingsPlanARN",
          "reservation_reservation_a_r_n": "reservation/ReservationARN"}
CUR_SECTION = {"tags": {"app": "kimi-k3"}, "commitments": [
    {"id": "cr-0block", "start": "2026-07-22T00:00:00Z", "end": "2026-08-15T00:00:00Z"}]}


def _cur2_rows() -> list[dict[str, str]]:
    rows = [dict(r) for r in csv.DictReader((DATA / "cur.csv").open())]
    credit = {**rows[2], "identity_line_item_id": "l14", "line_item_line_item_type": "Credit",
              "line_item_unblended_cost": "-300"}
    refund = {**rows[2], "identity_line_item_id": "l15", "line_item_line_item_type": "Refund",
              "line_item_unblended_cost": "-40"}
    return [*rows, credit, refund]


def test_the_legacy_rule_is_aws_mechanical_mapping():
    assert canonical("lineItem/UsageStartDate") == "line_item_usage_start_date"
    assert canonical("reservation/ReservationARN") == "reservation_reservation_a_r_n"
    assert canonical("product/productFamily") == "product_product_family"
    assert canonical("resourceTags/user:app") == "resource_tags_user_app"
    assert all(canonical(v) == k for k, v in LEGACY.items())


@pytest.mark.parametrize("container", ["csv", "csv.gz", "parquet"])
def test_legacy_cur_reads_as_cur_2_0(tmp_path, container):
    rows = _cur2_rows()
    tag = [json.loads(r["resource_tags"]).get("user_app", "") if r["resource_tags"] else "" for r in rows]
    if container == "parquet":  # legacy CUR Parquet: snake names, naive timestamps, one column per tag
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        parse = lambda v: dt.datetime.fromisoformat(v.replace("Z", ""))  # noqa: E731
        stamp = ("line_item_usage_start_date", "line_item_usage_end_date")
        data = {k: pa.array([parse(r[k]) for r in rows], pa.timestamp("ms")) if k in stamp else
                pa.array([float(r[k]) if r[k] else None for r in rows]) if k.endswith(("_cost", "_to_date",
                                                                                      "_commitment")) else
                pa.array([r[k] or None for r in rows], pa.string()) for k in LEGACY}
        data["resource_tags_user_app"] = pa.array([t or None for t in tag], pa.string())
        path = tmp_path / "legacy.parquet"
        pq.write_table(pa.table(data), path)
    else:
        header = [*LEGACY.values(), "resourceTags/user:app"]
        path = _write_csv(tmp_path / f"legacy.{container}", header,
                          [[r[k] for k in LEGACY] + [t] for r, t in zip(rows, tag)])
    out = tmp_path / "costs.yaml"
    lines = commands.import_bill("cur", path, out, _section(currency="EUR", conversions=USD, costs=CUR_SECTION),
                                 WINDOW)
    assert _items(out) == STEADY_ITEMS, lines
    assert {(c["category"], c["amount"]) for c in _meta(out)["credits"]} == {("credit", -240.0), ("refund", -32.0)}


# --- Google Cloud: BigQuery CSV with dotted headers, JSON with credits[] -------------------------------------------

GCP_CSV = ["billing_account_id", "service.id", "service.description", "sku.id", "sku.description",
           "usage_start_time", "usage_end_time", "project.id", "project.name", "labels", "system_labels",
           "location.location", "location.region", "cost", "currency", "currency_conversion_rate", "usage.amount",
           "usage.unit", "credits", "invoice.month", "cost_type"]


def _gcp_records() -> list[dict]:
    recs = [json.loads(x) for x in (DATA / "gcp.jsonl").read_text().splitlines() if x.strip()]
    recs[1]["credits"].append({"name": "Free trial", "full_name": "Free trial credit", "amount": -250.0,
                               "type": "PROMOTION", "id": "p-1"})
    return recs


def test_gcp_bigquery_csv_with_dotted_headers(tmp_path):
    rows = []
    for r in _gcp_records():
        when = lambda v: v.replace("T", " ").replace("Z", " UTC")  # noqa: E731 - BigQuery's CSV time format
        rows.append([r["billing_account_id"], r["service"]["id"], r["service"]["description"], r["sku"]["id"],
                     r["sku"]["description"], when(r["usage_start_time"]), when(r["usage_end_time"]),
                     r["project"]["id"], "", json.dumps(r["labels"]), "[]", "us-central1", "us-central1",
                     repr(r["cost"]), r["currency"], "1.0", "1", "hour", json.dumps(r["credits"]), "202607",
                     r["cost_type"]])
    path = _write_csv(tmp_path / "gcp.csv", GCP_CSV, rows)
    out = tmp_path / "costs.yaml"
    lines = commands.import_bill("gcp", path, out, _section(currency="EUR", costs=K3), WINDOW)
    assert _items(out) == STEADY_ITEMS, lines  # not "(no service)": the dotted headers are read
    assert [(c["category"], c["service"]) for c in _meta(out)["credits"]] == [("credit PROMOTION",
                                                                                "Compute Engine")]


def test_gcp_json_array_with_credits(tmp_path):
    path = tmp_path / "gcp.json"
    path.write_text(json.dumps(_gcp_records(), indent=1))
    out = tmp_path / "costs.yaml"
    commands.import_bill("gcp", path, out, _section(currency="EUR", costs=K3), WINDOW)
    assert _items(out) == STEADY_ITEMS  # the committed-use credit netted, the promotion listed apart
    credit = _meta(out)["credits"][0]
    assert credit["amount"] == -250.0  # its line's 20 days all in the window


# --- bills: nothing mapped, amounts unrounded -------------------------------------------------------------------------

def test_a_bill_with_nothing_mapped_is_exit_2(tmp_path, capsys):
    err = _cli_one_line(capsys, ["import", "focus", str(DATA / "focus.csv"), "--out", str(tmp_path / "c.yaml"),
                                 "--window", "2027-01-01T00:00:00Z/2027-01-22T00:00:00Z", "--tag", "app=kimi-k3"])
    assert "nothing mapped" in err and "outside the window" in err
    assert not (tmp_path / "c.yaml").exists()


def test_a_tiny_amount_is_stored_unrounded(tmp_path):
    rows = focus_rows("1.2")[5:6]  # the storage line
    rows[0]["EffectiveCost"] = "0.000195"
    path = _write_csv(tmp_path / "f.csv", FOCUS_12, [[r[c] for c in FOCUS_12] for r in rows])
    commands.import_bill("focus", path, tmp_path / "c.yaml", _section(currency="EUR", costs=K3), WINDOW)
    assert read_costs(tmp_path / "c.yaml").storage == 0.000195


# --- a file no importer recognises ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, sample, needle", [
    pytest.param("focus", "cur.csv", "looks like an AWS CUR 2.0 export (k3 import cur)", id="cur-given-to-focus"),
    pytest.param("cur", "focus.csv", "looks like a FOCUS export (k3 import focus)", id="focus-given-to-cur"),
    pytest.param("usage", "pagerduty-rest.json", "looks like no known export", id="pagerduty-given-to-usage"),
    pytest.param("jira", "usage.jsonl", "looks like API responses with usage", id="usage-given-to-jira"),
    pytest.param("pagerduty", "opsgenie.json", "looks like an Opsgenie incidents export", id="opsgenie-given-to-pd"),
])
def test_a_file_no_importer_recognises_is_one_line(tmp_path, capsys, kind, sample, needle):
    args = ["import", kind, str(DATA / sample), "--out", str(tmp_path / "out"), "--window", WINDOW_ARG]
    args += {"focus": ["--tag", "a=b"], "cur": ["--tag", "a=b"], "usage": ["--price-input", "1", "--price-output", "1"],
             "jira": ["--set", "imports.hours.labels={\"a\": \"install\"}"]}.get(kind, [])
    err = _cli_one_line(capsys, args)
    assert needle in err and "expected" in err, err


# --- Jira and Tempo ---------------------------------------------------------------------------------------------------

def _started(day: str, hour: int) -> str:
    return f"2026-{day}T{hour:02d}:00:00.000+0000"


def _rest_worklog(wid: int, issue_id: str, started: str, seconds: int) -> dict:
    return {"self": f"https://k3.atlassian.net/rest/api/3/issue/{issue_id}/worklog/{wid}",
            "author": {"accountId": "5b10ac8d82e05b22cc7d4ef5", "displayName": "Ana"},
            "comment": {"type": "doc", "version": 1, "content": []}, "created": started, "updated": started,
            "started": started, "timeSpent": f"{seconds // 3600}h", "timeSpentSeconds": seconds, "id": str(wid),
            "issueId": issue_id}


REST_LOGS = [_rest_worklog(1, "10001", _started("07-27", 9), 14400), _rest_worklog(2, "10002", _started("07-28", 14),
                                                                                     5400),
             _rest_worklog(3, "10001", _started("08-04", 10), 3600)]
ISSUES = {"expand": "schema,names", "startAt": 0, "maxResults": 50, "total": 2, "issues": [
    {"expand": "", "id": "10001", "self": "https://k3.atlassian.net/rest/api/3/issue/10001", "key": "K3OPS-1",
     "fields": {"labels": ["kimi-k3", "setup"], "components": [{"id": "1", "name": "Serving"}]}},
    {"expand": "", "id": "10002", "self": "https://k3.atlassian.net/rest/api/3/issue/10002", "key": "K3OPS-2",
     "fields": {"labels": ["kimi-k3", "tuning"], "components": []}}]}
EXPECTED_HOURS = {("2026-W31", "install"): 4.0, ("2026-W31", "vllm-tuning"): 1.5, ("2026-W32", "install"): 1.0}
LABEL_MAP = {"labels": {"setup": "install", "tuning": "vllm-tuning"}}


def _hours(path: Path) -> dict:
    return {(h.week, h.category): h.hours for h in read_hours(path)}


def test_jira_rest_worklogs_by_issue_id_resolved_through_an_issues_export(tmp_path, capsys):
    logs = tmp_path / "worklogs.json"
    logs.write_text(json.dumps({"startAt": 0, "maxResults": 5000, "total": 3, "worklogs": REST_LOGS}))
    issues = tmp_path / "issues.json"
    issues.write_text(json.dumps(ISSUES))
    err = _cli_one_line(capsys, ["import", "jira", str(logs), "--out", str(tmp_path / "h.csv"), "--window", WINDOW_ARG,
                                 "--set", json.dumps(LABEL_MAP["labels"]).join(["imports.hours.labels=", ""])])
    assert "nothing mapped" in err and "not resolved to a key" in err  # never an empty hours.csv with exit 0
    assert not (tmp_path / "h.csv").exists()
    out = tmp_path / "hours.csv"
    commands.import_worklogs(logs, out, _section(hours={**LABEL_MAP, "issues_export": str(issues)}), WINDOW)
    assert _hours(out) == EXPECTED_HOURS
    listed = tmp_path / "list.json"  # POST /rest/api/3/worklog/list: a bare array; mapped by issue id
    listed.write_text(json.dumps(REST_LOGS))
    commands.import_worklogs(listed, tmp_path / "h2.csv", _section(hours={"issues": {
        "10001": "install", "10002": "vllm-tuning"}}), WINDOW)
    assert _hours(tmp_path / "h2.csv") == EXPECTED_HOURS


def test_jira_issues_csv_export_resolves_ids(tmp_path):
    logs = tmp_path / "worklogs.json"
    logs.write_text(json.dumps({"startAt": 0, "maxResults": 5000, "total": 3, "worklogs": REST_LOGS}))
    issues = _write_csv(tmp_path / "issues.csv", ["Summary", "Issue key", "Issue id", "Labels", "Labels"],
                        [["install", "K3OPS-1", "10001", "kimi-k3", "setup"],
                         ["tune", "K3OPS-2", "10002", "kimi-k3", "tuning"]])
    commands.import_worklogs(logs, tmp_path / "h.csv", _section(hours={**LABEL_MAP, "issues_export": str(issues)}),
                             WINDOW)
    assert _hours(tmp_path / "h.csv") == EXPECTED_HOURS


def test_jira_issue_json_with_its_worklogs(tmp_path):
    issues = json.loads(json.dumps(ISSUES))
    for issue in issues["issues"]:
        mine = [w for w in REST_LOGS if w["issueId"] == issue["id"]]
        issue["fields"]["worklog"] = {"startAt": 0, "maxResults": 20, "total": len(mine), "worklogs": mine}
    path = tmp_path / "search.json"
    path.write_text(json.dumps(issues))
    commands.import_worklogs(path, tmp_path / "h.csv", _section(hours=LABEL_MAP), WINDOW)
    assert _hours(tmp_path / "h.csv") == EXPECTED_HOURS
    one = tmp_path / "issue.json"  # GET /rest/api/3/issue/K3OPS-1: one issue object
    one.write_text(json.dumps(issues["issues"][0]))
    commands.import_worklogs(one, tmp_path / "h1.csv", _section(hours=LABEL_MAP), WINDOW)
    assert _hours(tmp_path / "h1.csv") == {("2026-W31", "install"): 4.0, ("2026-W32", "install"): 1.0}


def test_tempo_v4_worklogs_carry_only_the_issue_id(tmp_path):
    results = [{"self": f"https://api.tempo.io/4/worklogs/{9000 + n}", "tempoWorklogId": 9000 + n,
                "issue": {"self": f"https://k3.atlassian.net/rest/api/2/issue/{w['issueId']}",
                          "id": int(w["issueId"])},
                "timeSpentSeconds": w["timeSpentSeconds"], "billableSeconds": w["timeSpentSeconds"],
                "startDate": w["started"][:10], "startTime": w["started"][11:19], "description": "work",
                "createdAt": w["started"][:19] + "Z", "updatedAt": w["started"][:19] + "Z",
                "author": {"self": "https://k3.atlassian.net/rest/api/2/user", "accountId": "a1"},
                "attributes": {"self": "", "values": []}} for n, w in enumerate(REST_LOGS)]
    path = tmp_path / "tempo.json"
    path.write_text(json.dumps({"self": "https://api.tempo.io/4/worklogs", "metadata": {
        "count": 3, "offset": 0, "limit": 50}, "results": results}))
    issues = tmp_path / "issues.json"
    issues.write_text(json.dumps(ISSUES))
    commands.import_worklogs(path, tmp_path / "h.csv", _section(hours={**LABEL_MAP, "issues_export": str(issues)}),
                             WINDOW)
    assert _hours(tmp_path / "h.csv") == EXPECTED_HOURS


# --- API usage --------------------------------------------------------------------------------------------------------

PRICES = {"default": {"input_per_mtok": 3.0, "cached_input_per_mtok": 0.3, "output_per_mtok": 15.0}}
CREATED = 1785146400  # 2026-07-27T10:00:00Z


def _chat(n: int, prompt: int, cached: int, completion: int) -> dict:
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": CREATED + n, "model": "kimi-k3",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached}}, "system_fingerprint": "fp_1"}


def _usage(tmp_path: Path, name: str, text: str, **usage) -> tuple[float, str]:
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / f"{name}.yaml"
    lines = commands.import_usage(path, out, _section(currency="USD", usage={"prices": PRICES, **usage}), WINDOW)
    return read_costs(out).api_bill_same_tasks, "\n".join(lines)


# 100k prompt (80k cached) + 2k out, and 10k prompt (none cached) + 500 out, per million tokens
OPENAI_COST = (20_000 * 3 + 80_000 * 0.3 + 2_000 * 15 + 10_000 * 3 + 500 * 15) / 1e6


def test_openai_batch_output_reply_under_response_body(tmp_path):
    lines = [{"id": f"batch_req_{n}", "custom_id": f"task-{n}", "response": {
        "status_code": 200, "request_id": f"req_{n}", "body": body}, "error": None}
        for n, body in enumerate([_chat(1, 100_000, 80_000, 2_000), _chat(2, 10_000, 0, 500)])]
    lines.append({"id": "batch_req_9", "custom_id": "task-9", "response": {"status_code": 500, "request_id": "r9",
                                                                            "body": {"error": {"message": "x"}}},
                  "error": None})
    lines.append({"id": "batch_req_10", "custom_id": "task-10", "response": None,
                  "error": {"code": "batch_expired", "message": "not run"}})
    cost, text = _usage(tmp_path, "out.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    assert cost == pytest.approx(OPENAI_COST) and "2 billed; 2 error repl(ies) not billed" in text


ANTHROPIC = [{"custom_id": "task-1", "result": {"type": "succeeded", "message": {
    "id": "msg_01", "type": "message", "role": "assistant", "model": "kimi-k3", "content": [{"type": "text",
                                                                                              "text": "ok"}],
    "stop_reason": "end_turn", "stop_sequence": None,
    "usage": {"input_tokens": 20_000, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 80_000,
              "output_tokens": 2_000}}}},
    {"custom_id": "task-2", "result": {"type": "succeeded", "message": {
        "id": "msg_02", "type": "message", "role": "assistant", "model": "kimi-k3", "content": [],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 10_000, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": 500}}}},
    {"custom_id": "task-3", "result": {"type": "errored", "error": {"type": "error", "error": {
        "type": "invalid_request_error", "message": "bad"}}}},
    {"custom_id": "task-4", "result": {"type": "expired"}}]


def test_anthropic_batch_results_input_tokens_exclude_the_cache(tmp_path):
    text = "".join(json.dumps(x) + "\n" for x in ANTHROPIC)
    inside = {"start": "2026-07-27T09:00:00Z", "end": "2026-07-28T09:00:00Z"}
    cost, lines = _usage(tmp_path, "results.jsonl", text, batch=inside)
    # the same tokens as the OpenAI sample: 20k fresh + 80k read = 100k input, so the same bill
    assert cost == pytest.approx(OPENAI_COST)
    assert "tokens: input 110000, cached input 80000" in lines and "2 error repl(ies) not billed" in lines
    assert "2 line(s) without a time: placed by the batch's dates" in lines
    assert _usage(tmp_path, "all.jsonl", text, all_rows=True)[0] == pytest.approx(OPENAI_COST)
    with pytest.raises(BadInputError, match="no time; expected"):
        _usage(tmp_path, "bare.jsonl", text)
    with pytest.raises(BadInputError, match="across the window's edge"):
        _usage(tmp_path, "edge.jsonl", text, batch={"start": "2026-08-13T12:00:00Z", "end": "2026-08-14T12:00:00Z"})
    with pytest.raises(BadInputError, match="nothing billed"):
        _usage(tmp_path, "before.jsonl", text, batch={"start": "2026-07-01T00:00:00Z", "end": "2026-07-02T00:00:00Z"})


def test_anthropic_cache_writes_priced_apart(tmp_path):
    row = json.loads(json.dumps(ANTHROPIC[1]))
    row["result"]["message"]["usage"]["cache_creation_input_tokens"] = 40_000
    path = tmp_path / "r.json"
    path.write_text(json.dumps(row))  # one JSON object
    prices = {"default": {**PRICES["default"], "cache_write_input_per_mtok": 3.75}}
    commands.import_usage(path, tmp_path / "c.yaml", _section(currency="USD", usage={"prices": prices,
                                                                                     "all_rows": True}), WINDOW)
    assert read_costs(tmp_path / "c.yaml").api_bill_same_tasks == pytest.approx(
        (10_000 * 3 + 40_000 * 3.75 + 500 * 15) / 1e6)


def test_litellm_spend_logs(tmp_path):
    def log(n: int, **kw) -> dict:
        return {"request_id": f"chatcmpl-{n}", "call_type": "acompletion", "api_key": "88dc28d0f030c55ed4ab77ed8faf",
                "spend": 0.001, "total_tokens": 0, "prompt_tokens": 0, "completion_tokens": 0,
                "startTime": "2026-07-27T10:00:00.000000Z", "endTime": "2026-07-27T10:00:02.000000Z",
                "completionStartTime": "2026-07-27T10:00:01.000000Z", "model": "kimi-k3", "model_id": "m1",
                "model_group": "kimi-k3", "api_base": "https://api.moonshot.ai/v1", "user": "", "metadata": {},
                "cache_hit": "False", "cache_key": "", "request_tags": [], "team_id": "", "end_user": "",
                "requester_ip_address": "", "status": "success", **kw}
    logs = [log(1, prompt_tokens=100_000, completion_tokens=2_000, total_tokens=102_000,
                metadata={"usage_object": {"prompt_tokens": 100_000, "completion_tokens": 2_000,
                                           "prompt_tokens_details": {"cached_tokens": 80_000}}}),
            log(2, prompt_tokens=10_000, completion_tokens=500, total_tokens=10_500),
            log(3, prompt_tokens=10_000, completion_tokens=500, cache_hit="True"),  # LiteLLM's own cache
            log(4, prompt_tokens=10_000, completion_tokens=0, status="failure")]
    cost, text = _usage(tmp_path, "spend.json", json.dumps(logs))
    assert cost == pytest.approx(OPENAI_COST) and "1 served from the gateway's cache" in text


def test_one_reply_counted_once_and_single_objects(tmp_path):
    a, b = _chat(1, 100_000, 80_000, 2_000), _chat(2, 10_000, 0, 500)
    cost, text = _usage(tmp_path, "dup.jsonl", "".join(json.dumps(x) + "\n" for x in (a, b, a)))
    assert cost == pytest.approx(OPENAI_COST)
    assert "1 duplicate(s) of a response id (or of a whole line without one) counted once" in text
    assert _usage(tmp_path, "arr.json", json.dumps([a, b]))[0] == pytest.approx(OPENAI_COST)
    assert _usage(tmp_path, "one.json", json.dumps(b))[0] == pytest.approx((10_000 * 3 + 500 * 15) / 1e6)


# --- PagerDuty and Opsgenie -------------------------------------------------------------------------------------------

def _pd(**kw) -> dict:
    return {"id": "Q2K3ONE", "type": "incident", "incident_number": 5201, "title": "engine died", "status": "resolved",
            "urgency": "high", "created_at": "2026-07-29T14:00:00Z", "resolved_at": "2026-07-29T14:18:00Z",
            "service": {"id": "PSVC1", "type": "service_reference", "summary": "kimi-k3-vllm"}, **kw}


def test_pagerduty_single_incident_and_self_contradicting_times(tmp_path):
    path = tmp_path / "incident.json"
    path.write_text(json.dumps({"incident": _pd()}))  # GET /incidents/{id}
    commands.import_incidents("pagerduty", path, tmp_path / "i.csv", _section(), WINDOW)
    assert [(i.id, i.minutes_to_recover) for i in read_incidents(tmp_path / "i.csv")] == [("Q2K3ONE", 18)]
    path.write_text(json.dumps([_pd(resolved_at="2026-07-29T13:00:00Z"),
                                _pd(id="Q2K3TWO", seconds_to_resolve=600)]))
    lines = "\n".join(commands.import_incidents("pagerduty", path, tmp_path / "j.csv", _section(), WINDOW))
    assert "warning: Q2K3ONE: resolved_at 2026-07-29T13:00:00Z before created_at" in lines
    assert "warning: Q2K3TWO: seconds_to_resolve 600 disagrees with resolved_at − created_at (1080 s)" in lines
    got = {i.id: i.minutes_to_recover for i in read_incidents(tmp_path / "j.csv")}
    assert got == {"Q2K3ONE": None, "Q2K3TWO": 10}  # a negative recovery is blank, never favourable


def test_opsgenie_services_by_name_and_nothing_kept_is_exit_2(tmp_path, capsys):
    doc = json.loads((DATA / "opsgenie.json").read_text())
    uuid = "8a3f2c1e-4b5d-4e6f-9a7b-1c2d3e4f5a6b"
    for inc in doc["data"]:
        inc["impactedServices"] = [uuid]
    doc["services"] = [{"id": uuid, "name": "kimi-k3-vllm", "teamId": "t1"}]
    path = tmp_path / "og.json"
    path.write_text(json.dumps(doc))
    commands.import_incidents("opsgenie", path, tmp_path / "i.csv", _section(incidents={
        "services": ["kimi-k3-vllm"]}), WINDOW)
    assert len(read_incidents(tmp_path / "i.csv")) == 2
    del doc["services"]
    path.write_text(json.dumps(doc))
    err = _cli_one_line(capsys, ["import", "opsgenie", str(path), "--out", str(tmp_path / "j.csv"), "--window",
                                 WINDOW_ARG, "--service", "kimi-k3-vllm"])
    assert "nothing kept" in err and uuid in err
