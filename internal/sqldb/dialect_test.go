package sqldb

import (
	"strings"
	"testing"
)

func TestDialectSQL(t *testing.T) {
	cols := []Column{{Name: "a", Type: "INTEGER"}, {Name: `b"c`, Type: ""}}
	for _, c := range []struct {
		got, want string
	}{
		{SQLite.quoteName("census.train"), `"census"."train"`},
		{Postgres.quote(`a"b`), `"a""b"`},
		{MySQL.quoteName("census.tr`ain"), "`census`.`tr``ain`"},
		{SQLite.tableExists("o'k"), `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'o''k'`},
		{Postgres.tableExists("t"), `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 't'`},
		{MySQL.tableExists("t"), `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 't'`},
		{strings.Join(SQLite.createSnapshot("s", "SELECT * FROM t", cols, nil), "; "),
			`CREATE TABLE "s" ("_edl_row" INTEGER PRIMARY KEY, "a" INTEGER, "b""c"); ` +
				`INSERT INTO "s" SELECT ROW_NUMBER() OVER () - 1 AS "_edl_row", q.* FROM (SELECT * FROM t) q`},
		{strings.Join(Postgres.createSnapshot("s", "SELECT * FROM t", cols, nil), "; "),
			`SET LOCAL max_parallel_workers_per_gather = 0; ` +
				`CREATE TABLE "s" AS SELECT ROW_NUMBER() OVER () - 1 AS "_edl_row", q.* FROM (SELECT * FROM t) q; ` +
				`ALTER TABLE "s" ADD PRIMARY KEY ("_edl_row")`},
		{strings.Join(MySQL.createSnapshot("s", "SELECT * FROM t", cols, nil), "; "),
			"CREATE TABLE `s` (`_edl_row` BIGINT NOT NULL PRIMARY KEY) AS SELECT (@edl_row := @edl_row + 1) AS `_edl_row`, " +
				"q.* FROM (SELECT @edl_row := -1) edl_init, (SELECT * FROM t) q"},
		{strings.Join(SQLite.createSnapshot("s", "SELECT * FROM t", cols[:1], []string{"id", "b"}), "; "),
			`CREATE TABLE "s" ("_edl_row" INTEGER PRIMARY KEY, "a" INTEGER); ` +
				`INSERT INTO "s" SELECT ROW_NUMBER() OVER (ORDER BY q."id", q."b") - 1 AS "_edl_row", q.* FROM (SELECT * FROM t) q`},
		{strings.Join(Postgres.createSnapshot("s", "SELECT * FROM t", cols, []string{"id"}), "; "),
			`SET LOCAL max_parallel_workers_per_gather = 0; ` +
				`CREATE TABLE "s" AS SELECT ROW_NUMBER() OVER (ORDER BY q."id") - 1 AS "_edl_row", q.* FROM (SELECT * FROM t) q; ` +
				`ALTER TABLE "s" ADD PRIMARY KEY ("_edl_row")`},
		{strings.Join(MySQL.createSnapshot("s", "SELECT * FROM t", cols, []string{"id"}), "; "),
			"CREATE TABLE `s` (`_edl_row` BIGINT NOT NULL PRIMARY KEY) AS SELECT ROW_NUMBER() OVER (ORDER BY q.`id`) - 1 AS `_edl_row`, " +
				"q.* FROM (SELECT * FROM t) q"},
		{MySQL.rename("a", "b"), "ALTER TABLE `a` RENAME TO `b`"},
		{SQLite.rename("a", "b"), `ALTER TABLE "a" RENAME TO "b"`},
		{Postgres.rename("a", "b"), `ALTER TABLE "a" RENAME TO "b"`},
		{strings.Join(MySQL.stageInput("p__edl_in", "SELECT * FROM t ORDER BY a", cols), "; "),
			"CREATE TABLE `p__edl_in` (`_edl_in_row` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY) SELECT * FROM t ORDER BY a; " +
				"UPDATE `p__edl_in` SET `_edl_in_row` = `_edl_in_row` - 1 ORDER BY `_edl_in_row`"},
		{strings.Join(Postgres.stageInput("p__edl_in", "SELECT * FROM t ORDER BY a", cols), "; "),
			`SET LOCAL max_parallel_workers_per_gather = 0; ` +
				`CREATE TABLE "p__edl_in" AS SELECT ROW_NUMBER() OVER () - 1 AS "_edl_in_row", q.* FROM (SELECT * FROM t ORDER BY a) q; ` +
				`ALTER TABLE "p__edl_in" ADD PRIMARY KEY ("_edl_in_row")`},
		{SQLite.createPredictions("p__edl_pred"), `CREATE TABLE "p__edl_pred" ("_edl_in_row" BIGINT NOT NULL PRIMARY KEY, class BIGINT NOT NULL, p1 REAL)`},
		{MySQL.createPredictions("p__edl_pred"), "CREATE TABLE `p__edl_pred` (`_edl_in_row` BIGINT NOT NULL PRIMARY KEY, class BIGINT NOT NULL, p1 DOUBLE)"},
		{Postgres.createResult(StagingFor("p"), []string{"a", "b"}, "y", true),
			`CREATE TABLE "p__edl_tmp" AS SELECT i."a", i."b", p.class AS "y", p.p1 AS "y_p1" FROM "p__edl_in" i JOIN "p__edl_pred" p ` +
				`ON p."_edl_in_row" = i."_edl_in_row" ORDER BY i."_edl_in_row"`},
		{MySQL.createResult(StagingFor("p"), []string{"a"}, "y", false),
			"CREATE TABLE `p__edl_tmp` AS SELECT i.`a`, p.class AS `y` FROM `p__edl_in` i JOIN `p__edl_pred` p " +
				"ON p.`_edl_in_row` = i.`_edl_in_row` ORDER BY i.`_edl_in_row`"},
		{Postgres.columnsOf("SELECT 1"), "SELECT * FROM (SELECT 1) q WHERE 1 = 0"},
		{Postgres.readRange("s", cols, 10, 20),
			`SELECT "_edl_row", "a", "b""c" FROM "s" WHERE "_edl_row" >= 10 AND "_edl_row" < 20 ORDER BY "_edl_row"`},
		{MySQL.rowCount("s"), "SELECT COALESCE(MAX(`_edl_row`) + 1, 0) FROM `s`"},
		{SQLite.firstNull("s", "y"), `SELECT MIN("_edl_row"), COUNT(*) FROM "s" WHERE "y" IS NULL`},
		{valueTypes("SELECT 1", "x"), `SELECT DISTINCT typeof("x") FROM (SELECT 1) q`},
		{SQLite.Project("SELECT * FROM t", []Projected{{Name: "a"}, {Name: "b", Cast: Text}, {Name: "c", Cast: Number}}),
			`SELECT q."a", CAST(q."b" AS TEXT) AS "b", CAST(q."c" AS REAL) AS "c" FROM (SELECT * FROM t) q`},
		{Postgres.Project("SELECT 1", []Projected{{Name: "b", Cast: Text}, {Name: "c", Cast: Number}}),
			`SELECT CAST(q."b" AS TEXT) AS "b", CAST(q."c" AS DOUBLE PRECISION) AS "c" FROM (SELECT 1) q`},
		{MySQL.Project("SELECT 1", []Projected{{Name: "b", Cast: Text}, {Name: "c", Cast: Number}}),
			"SELECT CAST(q.`b` AS CHAR) AS `b`, CAST(q.`c` AS DOUBLE) AS `c` FROM (SELECT 1) q"},
		{SQLite.createModels(), `CREATE TABLE IF NOT EXISTS "elasticdl_models" (name TEXT NOT NULL PRIMARY KEY, created_at TEXT NOT NULL, ` +
			`statement TEXT, model_def TEXT, model_params TEXT, summary TEXT, checkpoint BLOB, model_text TEXT)`},
		{Postgres.createModels(), `CREATE TABLE IF NOT EXISTS "elasticdl_models" (name TEXT NOT NULL PRIMARY KEY, created_at TEXT NOT NULL, ` +
			`statement TEXT, model_def TEXT, model_params TEXT, summary TEXT, checkpoint BYTEA, model_text TEXT)`},
		{MySQL.createModels(), "CREATE TABLE IF NOT EXISTS `elasticdl_models` (name VARCHAR(255) NOT NULL PRIMARY KEY, created_at VARCHAR(255) NOT NULL, " +
			"statement LONGTEXT, model_def LONGTEXT, model_params LONGTEXT, summary LONGTEXT, checkpoint LONGBLOB, model_text LONGTEXT)"},
		{SQLite.createEvaluation("s.r"), `CREATE TABLE IF NOT EXISTS "s"."r" (model TEXT NOT NULL, metric TEXT NOT NULL, value REAL, ` +
			`records BIGINT NOT NULL, evaluated_at TEXT NOT NULL)`},
		{MySQL.createEvaluation("r"), "CREATE TABLE IF NOT EXISTS `r` (model VARCHAR(255) NOT NULL, metric VARCHAR(255) NOT NULL, value DOUBLE, " +
			"records BIGINT NOT NULL, evaluated_at VARCHAR(255) NOT NULL)"},
		{Postgres.placeholders(3), "$1, $2, $3"},
		{MySQL.placeholders(2), "?, ?"},
	} {
		if c.got != c.want {
			t.Errorf("got  %s\nwant %s", c.got, c.want)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		d    Dialect
		typ  string
		want Kind
	}{
		{SQLite, "INTEGER", Number}, {SQLite, "BIGINT", Number}, {SQLite, "REAL", Number}, {SQLite, "DOUBLE PRECISION", Number},
		{SQLite, "NUMERIC", Number}, {SQLite, "DECIMAL(10, 2)", Number}, {SQLite, "BOOLEAN", Number}, {SQLite, "float", Number},
		{SQLite, "TEXT", Text}, {SQLite, "VARCHAR(10)", Text}, {SQLite, "NCHAR(3)", Text}, {SQLite, "CLOB", Text},
		{SQLite, "BLOB", 0}, {SQLite, "DATE", 0}, {SQLite, "DATETIME", 0}, {SQLite, "TIMESTAMP", 0}, {SQLite, "", byValues},
		{Postgres, "INT4", Number}, {Postgres, "INT8", Number}, {Postgres, "INT2", Number}, {Postgres, "FLOAT8", Number},
		{Postgres, "FLOAT4", Number}, {Postgres, "NUMERIC", Number},
		{Postgres, "TEXT", Text}, {Postgres, "VARCHAR", Text}, {Postgres, "BPCHAR", Text},
		{Postgres, "BOOL", 0}, {Postgres, "DATE", 0}, {Postgres, "BYTEA", 0}, {Postgres, "JSONB", 0}, {Postgres, "16385", 0}, {Postgres, "", 0},
		{MySQL, "INT", Number}, {MySQL, "UNSIGNED BIGINT", Number}, {MySQL, "TINYINT", Number}, {MySQL, "DECIMAL", Number},
		{MySQL, "DOUBLE", Number}, {MySQL, "FLOAT", Number},
		{MySQL, "VARCHAR", Text}, {MySQL, "CHAR", Text}, {MySQL, "TEXT", Text}, {MySQL, "LONGTEXT", Text}, {MySQL, "ENUM", Text},
		{MySQL, "BLOB", 0}, {MySQL, "VARBINARY", 0}, {MySQL, "DATETIME", 0}, {MySQL, "JSON", 0}, {MySQL, "BIT", 0}, {MySQL, "NULL", 0},
	} {
		if got := c.d.classify(c.typ); got != c.want {
			t.Errorf("%v.classify(%q) = %v, want %v", c.d, c.typ, got, c.want)
		}
	}
}

func TestKindOfValues(t *testing.T) {
	for _, c := range []struct {
		classes []string
		kind    Kind
		typ     string
	}{
		{[]string{"integer", "real", "null"}, Number, "NUMERIC"},
		{nil, Number, "NUMERIC"},
		{[]string{"integer", "text"}, Text, "TEXT"},
		{[]string{"text", "blob"}, 0, "BLOB"},
	} {
		if k, typ := kindOfValues(c.classes); k != c.kind || typ != c.typ {
			t.Errorf("kindOfValues(%q) = %v, %s, want %v, %s", c.classes, k, typ, c.kind, c.typ)
		}
	}
}

func TestSnapshotName(t *testing.T) {
	a := SnapshotName("run-ABC7XYZ", "SELECT * FROM t")
	if !strings.HasPrefix(a, "elasticdl_snap_run_abc7xyz_") || !IsSnapshotName(a) {
		t.Errorf("SnapshotName = %q", a)
	}
	if b := SnapshotName("run-ABC7XYZ", "SELECT * FROM t"); b != a {
		t.Errorf("not a function of its arguments: %q, %q", a, b)
	}
	if b := SnapshotName("run-ABC7XYZ", "SELECT * FROM u"); b == a {
		t.Errorf("two sources, one name %q", a)
	}
	long := SnapshotName(strings.Repeat("x", 200)+"é", "q")
	if len(long) > 63-len("_tmp") || !IsSnapshotName(long) {
		t.Errorf("SnapshotName of a long run ID = %q (%d bytes): want a snapshot's name within 59 bytes", long, len(long))
	}
	for _, name := range []string{"train", "elasticdl_snap_x", "elasticdl_snap_run_0123abcd_tmp", `elasticdl_snap_a"b_0123abcd`} {
		if IsSnapshotName(name) {
			t.Errorf("IsSnapshotName(%q) = true", name)
		}
	}
}
