// Package storagetest gives tests a fresh prefix of the S3 server that
// `make s3-up` (hack/s3.sh) starts, or skips them where there is none.
package storagetest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"elasticdl/internal/storage"
)

// Available reports whether tests should use S3: a bucket is named, or
// ELASTICDL_REQUIRE_S3=1 (CI starts a server and wants a failure, not a
// skip, when it is missing).
func Available() bool {
	return os.Getenv("ELASTICDL_S3_BUCKET") != "" || os.Getenv("ELASTICDL_REQUIRE_S3") == "1"
}

// Location is s3://BUCKET/test/NAME-PID, a prefix of the test bucket of
// its own, emptied when t ends; it skips t when no server is named.
func Location(t testing.TB) string {
	t.Helper()
	bucket := os.Getenv("ELASTICDL_S3_BUCKET")
	if bucket == "" {
		if os.Getenv("ELASTICDL_REQUIRE_S3") == "1" {
			t.Fatal("ELASTICDL_S3_BUCKET is not set: start an S3 server with `eval \"$(hack/s3.sh up)\"`")
		}
		t.Skip("no S3 server: eval \"$(hack/s3.sh up)\" starts one")
	}
	loc := fmt.Sprintf("s3://%s/test/%s-%d", bucket, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()), os.Getpid())
	s, err := storage.Open(context.Background(), loc, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	empty(t, s)
	t.Cleanup(func() { empty(t, s) })
	return loc
}

// Store is the store at Location(t).
func Store(t testing.TB) (storage.Store, string) {
	t.Helper()
	loc := Location(t)
	s, err := storage.Open(context.Background(), loc, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	return s, loc
}

func empty(t testing.TB, s storage.Store) {
	ctx := context.Background()
	infos, err := s.List(ctx, "")
	if err != nil {
		t.Errorf("emptying %s: %v", s.URL(""), err)
		return
	}
	for _, i := range infos {
		if err := s.Delete(ctx, i.Name); err != nil {
			t.Errorf("emptying %s: %v", s.URL(""), err)
		}
	}
}
