"""Record readers: the job's data sources, read by record range.

The master hands a worker tasks "records [start, end) of source NAME"; a
reader opens NAME once and serves each task's range. The formats and their
decoding are the Go workers' (package data), so a Python job and a Go job
train on the same records:

* IDX images (MNIST's format, plain or gzipped; the labels file is found by
  name): features are pixel/255 as float32 of shape [rows, cols, 1].
* ``*.csv`` without a header: every column a float32 feature but the last,
  the int label.
* ``csv://PATH?schema=...[&header=true]``: a CSV file with declared columns
  (``num``, ``cat``, ``cat(V1|V2)``, ``hash(N)``, ``id``, ``label``,
  ``ignore``);
  categorical columns become int64 ids in one id space, as in Go.
* ``sqlite://``, ``postgres://``, ``mysql://``: a database table's snapshot
  (an ``elasticdl sql`` job's, or ``--training_data=sqlite://...?table=``),
  read through the elasticdl binary (``elasticdl data serve``), the Go
  workers' own reader: no database driver in Python, and the same records.
* ``*.parquet``, a directory of them, ``parquet://PATH?schema=...``: read the
  same way, through the Go workers' reader (no pyarrow needed).

A user's own format: pass ``reader=`` to :meth:`elasticdl.Job.batches`, a
callable ``(name, start, end) -> Records``.
"""

import csv
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import threading
import urllib.parse

import numpy as np

__all__ = ["Records", "open_source", "DataError"]


class DataError(Exception):
    """A data source cannot be opened or read."""


class Records:
    """Decoded records of one range.

    x: float32 array [n, *feature_shape]; y: int64 labels [n]; ids: int64
    categorical ids [n, fields] or None; index: the source record numbers
    [n]; corrupt: (record, error) of records that could not be decoded
    (skipped, reported to the master).
    """

    __slots__ = ("x", "y", "ids", "index", "corrupt")

    def __init__(self, x, y, ids=None, index=None, corrupt=()):
        self.x = np.asarray(x, dtype=np.float32)
        self.y = np.asarray(y, dtype=np.int64)
        self.ids = None if ids is None else np.asarray(ids, dtype=np.int64)
        n = len(self.y)
        if len(self.x) != n or (self.ids is not None and len(self.ids) != n):
            raise DataError("records: %d feature rows, %d labels, %s id rows: they must agree"
                            % (len(self.x), n, "no" if self.ids is None else len(self.ids)))
        self.index = np.arange(n, dtype=np.int64) if index is None else np.asarray(index, dtype=np.int64)
        self.corrupt = list(corrupt)

    def __len__(self):
        return len(self.y)

    def take(self, order):
        """The records in the order of the index array ``order``."""
        return Records(self.x[order], self.y[order], None if self.ids is None else self.ids[order],
                       self.index[order], self.corrupt)


def open_source(name):
    """Opens a data source by the name the master uses for it."""
    if "://" in name:
        scheme = name.split("://", 1)[0]
        if scheme == "csv":
            return SchemaCSV(name)
        if scheme in GO_SCHEMES or scheme == "parquet":
            return GoSource(name)
        if scheme == "synthetic-ctr":
            raise DataError("%s: generated data is read by elasticdl's Go workers only; write it to a file with "
                            "`elasticdl data export --data=%s --output=FILE.csv` and train on the csv:// URI it prints" % (name, name))
        raise DataError("%s: unsupported scheme %r (IDX files, *.csv, csv://PATH?schema=..., *.parquet, parquet://, %s)"
                        % (name, scheme, ", ".join(s + "://" for s in GO_SCHEMES)))
    base = os.path.basename(name)
    if "idx3-ubyte" in base:
        return IDX(name)
    if base.lower().endswith(".csv"):
        return PlainCSV(name)
    if base.lower().endswith(".parquet") or _parquet_dir(name):
        return GoSource(name)  # decoded by the Go reader: no pyarrow, the Go workers' records
    raise DataError("%s: unsupported data format (IDX images files named *idx3-ubyte*, *.csv, csv://PATH?schema=..., "
                    "*.parquet or a directory of them)" % name)


def _parquet_dir(path):
    """Whether path is a directory holding a *.parquet file (as data.Open)."""
    try:
        return any(e.is_file() and e.name.lower().endswith(".parquet") for e in os.scandir(path))
    except OSError:
        return False


GO_SCHEMES = ("sqlite", "postgres", "postgresql", "mysql")


class GoSource:
    """A source read by the elasticdl binary's own reader: ``elasticdl data
    serve --data=NAME``, one helper process per source, asked for ranges on
    its standard input (protocol: cli/dataserve.go). The database's
    password, when the URI has none, comes from $ELASTICDL_DB_PASSWORD,
    which the helper inherits."""

    def __init__(self, name):
        binary = os.environ.get("ELASTICDL_BINARY") or shutil.which("elasticdl")
        if not binary:
            raise DataError("%s: read by the elasticdl binary, which is not on PATH and ELASTICDL_BINARY is unset" % name)
        self.name, self._binary = name, binary
        self._lock = threading.Lock()  # the courier prefetches beside the main thread
        self._start()

    def _start(self):
        self._p = subprocess.Popen([self._binary, "data", "serve", "--data=" + self.name], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._n = int(self._header()["records"])

    def _header(self):
        line = self._p.stdout.readline()
        if not line:
            self._p.stdin.close()
            err = self._p.stderr.read().decode(errors="replace").strip()
            self._p.wait()
            if err.startswith("elasticdl data: "):  # the Go reader's error names the source
                raise _Gone(err[len("elasticdl data: "):].splitlines()[0])
            raise _Gone("%s: %s" % (self.name, err or "the reader exited (code %s)" % self._p.returncode))
        return json.loads(line)

    def __len__(self):
        return self._n

    def _ask(self, start, end):
        self._p.stdin.write(b"%d %d\n" % (start, end))
        self._p.stdin.flush()
        h = self._header()
        if h.get("error"):
            raise DataError(h["error"])
        h["width"] = int(np.prod(h["feature_shape"])) if h["feature_shape"] else 1
        size = h["n"] * (4 * h["width"] + 4 + 8 + 8 * h["num_categorical"])
        raw = self._p.stdout.read(size)
        if len(raw) != size:
            raise _Gone("%s: the reader's reply for [%d, %d) is cut short" % (self.name, start, end))
        return h, raw

    def read(self, start, end):
        with self._lock:
            try:
                h, raw = self._ask(start, end)
            except (BrokenPipeError, _Gone):
                # The helper died (killed, out of memory): a new one, once.
                self.close()
                self._start()
                h, raw = self._ask(start, end)
        n, shape, k, width = h["n"], h["feature_shape"], h["num_categorical"], h["width"]
        at = 0

        def take(dtype, count):
            nonlocal at
            a = np.frombuffer(raw, dtype, count, at)
            at += a.nbytes
            return a

        x = take("<f4", n * width).reshape([n] + list(shape))
        y = take("<i4", n).astype(np.int64)
        index = take("<i8", n)
        ids = take("<i8", n * k).reshape(n, k) if k else None
        corrupt = [(int(r), e) for r, e in h.get("corrupt") or ()]
        return Records(x, y, ids, index, corrupt)

    def close(self):
        if self._p.poll() is None:
            self._p.stdin.close()
        self._p.wait()


class _Gone(DataError):
    """The reader process ended."""


def _read_maybe_gzip(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DataError("%s: %s" % (path, e.strerror or e)) from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise DataError("%s: bad gzip data: %s" % (path, e)) from None
    return raw


class IDX:
    """An MNIST-style pair of IDX files, loaded whole (60000 images: 47 MB)."""

    def __init__(self, path):
        base = os.path.basename(path)
        labels = os.path.join(os.path.dirname(path), base.replace("images-idx3", "labels-idx1"))
        if labels == path:
            raise DataError("%s: cannot name its labels file (want images-idx3 in the name)" % path)
        img = _read_maybe_gzip(path)
        lab = _read_maybe_gzip(labels)
        if len(img) < 16 or struct.unpack(">I", img[:4])[0] != 0x803:
            raise DataError("%s: not an IDX3 unsigned-byte images file" % path)
        n, rows, cols = struct.unpack(">III", img[4:16])
        if len(img) != 16 + n * rows * cols:
            raise DataError("%s: %d bytes of images, the header says %d" % (path, len(img) - 16, n * rows * cols))
        if len(lab) < 8 or struct.unpack(">I", lab[:4])[0] != 0x801:
            raise DataError("%s: not an IDX1 unsigned-byte labels file" % labels)
        (nl,) = struct.unpack(">I", lab[4:8])
        if nl != n or len(lab) != 8 + n:
            raise DataError("%s: %d labels for %d images" % (labels, nl, n))
        self.name = path
        self.shape = (rows, cols, 1)
        self._pixels = np.frombuffer(img, dtype=np.uint8, offset=16).reshape(n, rows, cols, 1)
        self._labels = np.frombuffer(lab, dtype=np.uint8, offset=8)

    def __len__(self):
        return len(self._labels)

    def read(self, start, end):
        _check_range(self.name, start, end, len(self))
        x = self._pixels[start:end].astype(np.float32) / np.float32(255)
        return Records(x, self._labels[start:end], index=np.arange(start, end))


def _check_range(name, start, end, n):
    if not 0 <= start <= end <= n:
        raise DataError("%s: records [%d, %d) are out of range (it has %d)" % (name, start, end, n))


class _CSVFile:
    """A CSV file's records, parsed once (the whole file is in memory)."""

    def __init__(self, path, header):
        try:
            with open(path, newline="") as f:
                rows = [r for r in csv.reader(f) if r]
        except OSError as e:
            raise DataError("%s: %s" % (path, e.strerror or e)) from None
        except csv.Error as e:
            raise DataError("%s: %s" % (path, e)) from None
        self.columns = rows[0] if header and rows else None
        self.rows = rows[1:] if header else rows


def _parse_float(s):
    s = s.strip()
    if s == "":
        return 0.0
    v = float(s)
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError("non-finite value %r" % s)
    return v


def _parse_label(s):
    v = float(s.strip())
    if v != int(v) or not -2**31 <= v < 2**31:
        raise ValueError("label %r is not an int32" % s)
    return int(v)


class PlainCSV:
    """A *.csv file without header: float features, the label last."""

    def __init__(self, path):
        self.name = path
        self._f = _CSVFile(path, header=False)
        width = len(self._f.rows[0]) if self._f.rows else 0
        if width < 2:
            raise DataError("%s: want at least one feature and a label per record" % path)
        self.shape = (width - 1,)

    def __len__(self):
        return len(self._f.rows)

    def read(self, start, end):
        _check_range(self.name, start, end, len(self))
        xs, ys, index, corrupt = [], [], [], []
        for i, row in enumerate(self._f.rows[start:end], start):
            try:
                if len(row) != self.shape[0] + 1:
                    raise ValueError("%d fields, want %d" % (len(row), self.shape[0] + 1))
                xs.append([_parse_float(v) for v in row[:-1]])
                ys.append(_parse_label(row[-1]))
                index.append(i)
            except ValueError as e:
                corrupt.append((i, "%s: record %d: %s" % (self.name, i, e)))
        return Records(np.array(xs, dtype=np.float32).reshape(-1, self.shape[0]), ys, index=index, corrupt=corrupt)


# FNV-1a 64, as the Go reader hashes categorical values.
_FNV_OFFSET, _FNV_PRIME, _MASK64 = 14695981039346656037, 1099511628211, (1 << 64) - 1
_CAT_BASE = 1 << 62


def _fnv1a(h, data):
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & _MASK64
    return h


_ITEM = re.compile(r"^([^:]+):(num|cat|id|label|ignore|hash\((\d+)\)|cat\(([^)]*)\))$")
_RANGE = re.compile(r"^(.*)\{(\d+)\.\.(\d+)\}(.*)$")


def parse_schema(text):
    """A schema in the Go syntax, as a list of (name, kind, arg)."""
    cols = []
    for item in [s.strip() for s in text.split(",") if s.strip()]:
        m = _ITEM.match(item)
        if not m:
            raise DataError("schema item %r: want NAME:KIND, KIND one of num, cat, cat(V1|V2|...), hash(N), id, label, ignore" % item)
        name, kind = m.group(1).strip(), m.group(2)
        arg = None
        if kind.startswith("hash"):
            kind, arg = "hash", int(m.group(3))
            if arg < 1:
                raise DataError("schema item %r: hash needs at least 1 bucket" % item)
        elif kind.startswith("cat("):
            kind, arg = "cat", m.group(4).split("|")
        names = [name]
        r = _RANGE.match(name)
        if r:
            lo, hi = int(r.group(2)), int(r.group(3))
            names = ["%s%d%s" % (r.group(1), k, r.group(4)) for k in range(lo, hi + 1)]
        cols += [(n, kind, arg) for n in names]
    if sum(1 for c in cols if c[1] == "label") != 1:
        raise DataError("schema %r: exactly one label column, please" % text)
    return cols


class SchemaCSV:
    """csv://PATH?schema=...: numeric features, categorical ids, a label."""

    def __init__(self, uri):
        u = urllib.parse.urlsplit(uri)
        path = u.netloc + u.path
        q = urllib.parse.parse_qs(u.query)
        if "schema" not in q:
            raise DataError("%s: want csv://PATH?schema=..." % uri)
        self.name = uri
        self._cols = parse_schema(q["schema"][0])
        header = q.get("header", ["false"])[0] == "true"
        self._f = _CSVFile(path, header)
        if header and self._f.columns is not None and [c.strip() for c in self._f.columns] != [c[0] for c in self._cols]:
            raise DataError("%s: the header's columns %s are not the schema's %s" % (uri, self._f.columns, [c[0] for c in self._cols]))
        # Each column's rule, as the Go reader's schemaPlan.
        self._plan, offset, self.num_dense, self.num_categorical = [], 0, 0, 0
        for name, kind, arg in self._cols:
            prefix = _fnv1a(_FNV_OFFSET, (name + "=").encode())
            size, vocab = 0, None
            if kind == "hash":
                size = arg
            elif kind == "cat" and arg is not None:
                vocab = {v: k for k, v in enumerate(arg)}
                size = len(arg) + 1
            self._plan.append((kind, prefix, offset, size, vocab))
            if kind in ("hash", "cat"):
                offset += size
                self.num_categorical += 1
            elif kind == "id":
                self.num_categorical += 1
            elif kind == "num":
                self.num_dense += 1
        self.shape = (self.num_dense,)

    def __len__(self):
        return len(self._f.rows)

    def _id(self, plan, value):
        kind, prefix, offset, size, vocab = plan
        if vocab is not None:
            return offset + vocab.get(value, size - 1)
        h = _fnv1a(prefix, value.encode())
        if size == 0:
            return _CAT_BASE | (h & (_CAT_BASE - 1))
        return offset + h % size

    def read(self, start, end):
        _check_range(self.name, start, end, len(self))
        n = end - start
        x = np.zeros((n, self.num_dense), dtype=np.float32)
        ids = np.zeros((n, self.num_categorical), dtype=np.int64)
        y, index, corrupt, k = [], [], [], 0
        for i, row in enumerate(self._f.rows[start:end], start):
            try:
                if len(row) != len(self._cols):
                    raise ValueError("%d fields, the schema has %d columns" % (len(row), len(self._cols)))
                d = c = 0
                label = None
                for plan, field in zip(self._plan, row):
                    kind = plan[0]
                    if kind == "num":
                        x[k, d] = _parse_float(field)
                        d += 1
                    elif kind in ("cat", "hash"):
                        ids[k, c] = self._id(plan, field.strip())
                        c += 1
                    elif kind == "id":
                        v = int(field.strip())
                        if not 0 <= v < 2 * _CAT_BASE:
                            raise ValueError("id %r: want an integer from 0 to 2^63-1" % field.strip())
                        ids[k, c] = v
                        c += 1
                    elif kind == "label":
                        label = _parse_label(field)
                y.append(label)
                index.append(i)
                k += 1
            except ValueError as e:
                corrupt.append((i, "%s: record %d: %s" % (self.name, i, e)))
        return Records(x[:k], y, ids[:k], index, corrupt)
