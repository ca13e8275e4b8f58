#!/usr/bin/python3
"""Converts kernlab's ticdata.rda (CoIL Challenge 2000: 9,822 customers of
an insurance company, 85 attributes, whether they bought caravan insurance)
into the CSV schema elasticdl reads (data.ParseSchema):

    caravan:label,n{1..23}:num,c{1..62}:cat

The 23 numeric attributes (household counts and numbers of policies) become
n1..n23, the 62 factors (customer types, the binned shares and contribution
levels) c1..c62, written as their level names; caravan is 1 for
"insurance". The first 5,822 records are the challenge's training set, the
last 4,000 its test set (kernlab's documentation). Writes DIR/train.csv,
DIR/test.csv (each with a header), DIR/schema (the schema above) and
DIR/columns.tsv (the original name of each column).

    hack/ticdata.py ticdata.rda DIR
"""
import csv
import os
import sys

import rdata

TRAIN = 5822
TOTAL = 9822


def main(rda, out):
    frame = rdata.conversion.convert(rdata.parser.parse_file(rda))["ticdata"]
    if frame.shape != (TOTAL, 86):
        sys.exit(f"{rda}: ticdata has shape {frame.shape}, want ({TOTAL}, 86)")
    label = frame["CARAVAN"]
    if sorted(label.cat.categories) != ["insurance", "noinsurance"]:
        sys.exit(f"{rda}: CARAVAN levels {list(label.cat.categories)}")
    attrs = [c for c in frame.columns if c != "CARAVAN"]
    numeric = [c for c in attrs if frame[c].dtype.kind == "f"]
    factors = [c for c in attrs if frame[c].dtype.name == "category"]
    if len(numeric) + len(factors) != len(attrs):
        sys.exit(f"{rda}: columns neither numeric nor factor: {set(attrs) - set(numeric) - set(factors)}")
    names = ["caravan"] + [f"n{i + 1}" for i in range(len(numeric))] + [f"c{i + 1}" for i in range(len(factors))]
    os.makedirs(out, exist_ok=True)
    for part, rows in (("train", range(0, TRAIN)), ("test", range(TRAIN, TOTAL))):
        with open(os.path.join(out, part + ".csv.tmp"), "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(names)
            for i in rows:
                row = [1 if label.iat[i] == "insurance" else 0]
                for c in numeric:
                    v = frame[c].iat[i]
                    row.append("" if v != v else int(v) if v == int(v) else v)  # NaN: empty, read as 0
                for c in factors:
                    v = frame[c].iat[i]
                    row.append("" if v != v else str(v))  # missing: empty, its own id
                w.writerow(row)
        os.replace(os.path.join(out, part + ".csv.tmp"), os.path.join(out, part + ".csv"))
    with open(os.path.join(out, "schema"), "w") as f:
        f.write(f"caravan:label,n{{1..{len(numeric)}}}:num,c{{1..{len(factors)}}}:cat\n")
    with open(os.path.join(out, "columns.tsv"), "w") as f:
        for n, c in zip(names, ["CARAVAN"] + numeric + factors):
            f.write(f"{n}\t{c}\n")
    print(f"ticdata: {TRAIN} training and {TOTAL - TRAIN} test records, {len(numeric)} numeric and "
          f"{len(factors)} categorical attributes, {int((label == 'insurance').sum())} buyers -> {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
