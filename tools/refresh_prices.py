"""Regenerate podctl/data/prices.toml from SkyPilot's GCP catalog (catalogs/v7/gcp/vms.csv).

    python tools/refresh_prices.py CATALOG.csv --commit SHA --as-of YYYY-MM-DD [--write]

SkyPilot (github.com/skypilot-org/skypilot-catalog) fetches Google's Cloud Billing catalog
into one CSV row per machine and zone: `Price` and `SpotPrice` in USD per hour. From it:

- TPU rows (`tpu-v5p-12288`, `tpu-v6e-256`, ...): the slice's hourly price / its chips
  (podctl.base.topology counts the chips, as everywhere else), per region. SkyPilot writes
  700.0 where a region does not sell a type; those rows are dropped.
- GPU rows: an `a3-highgpu-8g` machine is its host row (vCPUs and memory) plus the
  `,,,H100,8` row in the same zone; / 8 per GPU.
- An on-demand row under 60% of the system's median over regions is dropped and named on
  stderr: the catalog has such rows (H100 in us-central1 at half of us-east4) that
  Google's billing catalog contradicts.

Every catalog row records where it came from (`source`: the catalog at --commit) and when
(`as_of`: the catalog's date, the day it was read). Rows that did not come from this catalog
(committed-use tiers, hand-kept figures) are kept as they are, and win over a catalog row
for the same system, region and tier; one whose figure was copied from a transcription
rather than read again from its source carries `reread = false`, and `podctl plan` says so
beside it. Without
--write the new table is printed. tools/data/skypilot-gcp-vms-6f65ab5-excerpt.csv holds the
catalog rows the shipped table was made from (SkyPilot's own rows, verbatim).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "podctl" / "data" / "prices.toml"
SOURCE_KEY = "skypilot"
UNAVAILABLE = 700.0  # SkyPilot's price for a type a region does not sell
GPU_MACHINES = {"H100": ("h100", "a3-highgpu-8g", 8)}  # catalog GPU -> (system, host, GPUs)
OUTLIER = 0.6


def catalog_rows(path: Path) -> tuple[list[dict], list[str]]:
    """The catalog's prices per chip/GPU-hour as table rows, and what was dropped, why."""
    sys.path.insert(0, str(REPO))
    from podctl.base.topology import parse_slice

    per: dict[tuple[str, str, str], float] = {}
    hosts: dict[tuple[str, str], tuple[float, float]] = {}
    gpus: dict[tuple[str, str], tuple[str, int, float, float]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            name, accel, zone = row["InstanceType"], row["AcceleratorName"], row["AvailabilityZone"]
            price, spot = float(row["Price"] or 0), float(row["SpotPrice"] or 0)
            if not name and accel.startswith("tpu-"):
                if price == UNAVAILABLE:
                    continue
                kind = parse_slice(accel.removeprefix("tpu-"))
                for tier, figure in (("on-demand", price), ("spot", spot)):
                    if figure > 0:
                        per.setdefault((kind.generation.key, row["Region"], tier),
                                       figure / kind.chips)
            elif not name and accel in GPU_MACHINES and int(float(row["AcceleratorCount"])) \
                    == GPU_MACHINES[accel][2]:
                gpus[(accel, zone)] = (row["Region"], GPU_MACHINES[accel][2], price, spot)
            elif name in {m[1] for m in GPU_MACHINES.values()}:
                hosts[(name, zone)] = (price, spot)
    for (accel, zone), (region, count, price, spot) in gpus.items():
        system, host, _ = GPU_MACHINES[accel]
        if (host, zone) not in hosts:
            continue
        h_price, h_spot = hosts[(host, zone)]
        per.setdefault((system, region, "on-demand"), (price + h_price) / count)
        if spot > 0:
            per.setdefault((system, region, "spot"), (spot + h_spot) / count)
    dropped = []
    for system in {k[0] for k in per}:
        on_demand = [v for k, v in per.items() if k[0] == system and k[2] == "on-demand"]
        median = statistics.median(on_demand)
        for key in [k for k, v in per.items() if k[0] == system and k[2] == "on-demand"
                    and v < OUTLIER * median]:
            dropped.append(f"{key[0]} {key[1]} on-demand ${per.pop(key):.4f}: under "
                           f"{OUTLIER:.0%} of the median ${median:.4f}")
    out = [{"system": s, "region": r, "tier": t, "usd": round(v, 6)}
           for (s, r, t), v in sorted(per.items())]
    return out, dropped


def merged(existing: dict, fresh: list[dict], as_of: str) -> list[dict]:
    kept = [r for r in existing.get("rows", []) if r["source"] != SOURCE_KEY]
    taken = {(r["system"], r["region"], r["tier"]) for r in kept}
    new = [{**r, "as_of": as_of, "source": SOURCE_KEY} for r in fresh
           if (r["system"], r["region"], r["tier"]) not in taken]
    order = {t: i for i, t in enumerate(("on-demand", "spot", "1y-cud", "3y-cud"))}
    return sorted(kept + new, key=lambda r: (r["system"], r["region"], order[r["tier"]]))


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):  # a TOML basic string: a quote or backslash in a note is escaped
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(v)


def render(text: str, table_rows: list[dict], commit: str) -> str:
    """TEXT (the current file) with its rows replaced and the catalog's source updated."""
    head = text.split("\nrows = [", 1)[0]
    # everything after the rows (the tables that are no catalog's: not published, sources)
    tail = text.split("\nrows = [", 1)[1].split("\n]\n", 1)[1].lstrip("\n")
    lines = [head, "rows = ["]
    for r in table_rows:
        fields = ", ".join(f"{k} = {_value(r[k])}" for k in ("system", "region", "tier", "usd",
                                                              "as_of", "source", "note", "reread")
                           if k in r)
        lines.append(f"  {{{fields}}},")
    lines += ["]", "", ""]
    body = "\n".join(lines) + tail
    start = body.index(f"\n{SOURCE_KEY} = ") + 1
    end = body.index("\n", start)
    url = (f"https://github.com/skypilot-org/skypilot-catalog/blob/{commit}/catalogs/v7/gcp/"
           "vms.csv (SkyPilot's GCP catalog, from Google's Cloud Billing catalog: a TPU "
           "slice's price / its chips; a GPU machine's host + GPU rows / its GPUs)")
    return body[:start] + f'{SOURCE_KEY} = "{url}"' + body[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("catalog", type=Path, help="SkyPilot's catalogs/v7/gcp/vms.csv")
    parser.add_argument("--commit", required=True, help="the catalog's commit (for the source)")
    parser.add_argument("--as-of", required=True, help="the catalog's date, YYYY-MM-DD")
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--write", action="store_true", help="write the table (else print it)")
    args = parser.parse_args(argv)
    text = args.table.read_text()
    fresh, dropped = catalog_rows(args.catalog)
    for line in dropped:
        print(f"dropped: {line}", file=sys.stderr)
    out = render(text, merged(tomllib.loads(text), fresh, args.as_of), args.commit)
    tomllib.loads(out)  # never write a table that does not parse
    if args.write:
        args.table.write_text(out)
    else:
        sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
