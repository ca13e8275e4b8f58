package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// s3Env is the S3 server of `make s3-up` (hack/s3.sh), or a skip — a
// failure where ELASTICDL_REQUIRE_S3=1 (CI starts one).
func s3Env(t *testing.T) (S3Config, string) {
	t.Helper()
	bucket := os.Getenv("ELASTICDL_S3_BUCKET")
	if bucket == "" {
		if os.Getenv("ELASTICDL_REQUIRE_S3") == "1" {
			t.Fatal("ELASTICDL_S3_BUCKET is not set: start an S3 server with `eval \"$(hack/s3.sh up)\"`")
		}
		t.Skip("no S3 server: eval \"$(hack/s3.sh up)\" starts one")
	}
	cfg, err := S3ConfigFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, bucket
}

// stores are the backends under test: a temp dir, and a fresh prefix of
// the test bucket when there is one.
func stores(t *testing.T) map[string]Store {
	t.Helper()
	local, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Store{"local": local}
	if os.Getenv("ELASTICDL_S3_BUCKET") != "" || os.Getenv("ELASTICDL_REQUIRE_S3") == "1" {
		cfg, bucket := s3Env(t)
		s, err := NewS3(context.Background(), cfg, bucket, "test/"+strings.ReplaceAll(t.Name(), "/", "_")+fmt.Sprint(os.Getpid()))
		if err != nil {
			t.Fatal(err)
		}
		out["s3"] = s
		t.Cleanup(func() {
			infos, _ := s.List(context.Background(), "")
			for _, i := range infos {
				s.Delete(context.Background(), i.Name)
			}
		})
	}
	return out
}

func TestStoreContract(t *testing.T) {
	ctx := context.Background()
	for kind, s := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			data := bytes.Repeat([]byte("0123456789"), 1000)
			if err := WriteAll(ctx, s, "a/b/obj", data); err != nil {
				t.Fatal(err)
			}
			got, err := ReadAll(ctx, s, "a/b/obj")
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("ReadAll = %d bytes, %v", len(got), err)
			}
			r, err := s.Open(ctx, "a/b/obj")
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 7)
			if n, err := r.ReadAt(buf, 9995); n != 5 || err != io.EOF || string(buf[:5]) != "56789" {
				t.Errorf("ReadAt at the end = %d %q, %v; want 5 \"56789\", EOF", n, buf[:n], err)
			}
			if n, err := r.ReadAt(buf, 13); n != 7 || err != nil || string(buf) != "3456789" {
				t.Errorf("ReadAt(13) = %d %q, %v", n, buf, err)
			}
			r.Close()

			// A write in flight is not an object yet; an aborted one never is.
			w, err := s.Create(ctx, "a/pending")
			if err != nil {
				t.Fatal(err)
			}
			w.Write([]byte("half"))
			w2, _ := s.Create(ctx, "a/aborted")
			w2.Write([]byte("never"))
			w2.Abort()
			if names := list(t, s, "a/"); names != "a/b/obj" {
				t.Errorf("List(a/) with a write in flight = %q, want only a/b/obj", names)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if names := list(t, s, "a/"); names != "a/b/obj a/pending" {
				t.Errorf("List(a/) = %q", names)
			}
			if names := list(t, s, "a/p"); names != "a/pending" {
				t.Errorf("List(a/p) = %q", names)
			}
			if info, err := s.Stat(ctx, "a/pending"); err != nil || info.Size != 4 {
				t.Errorf("Stat = %+v, %v", info, err)
			}

			_, err = s.Open(ctx, "a/missing")
			if !errors.Is(err, ErrNotExist) || !strings.Contains(err.Error(), "a/missing") {
				t.Errorf("Open(missing) = %v: want ErrNotExist naming the object", err)
			}
			if err := s.Delete(ctx, "a/pending"); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(ctx, "a/pending"); err != nil {
				t.Errorf("Delete(missing) = %v, want nil", err)
			}
			if _, err := s.Stat(ctx, "a/pending"); !errors.Is(err, ErrNotExist) {
				t.Errorf("Stat(deleted) = %v", err)
			}
			for _, bad := range []string{"", "/abs", "a/../../x"} {
				if _, err := s.Create(ctx, bad); err == nil {
					t.Errorf("Create(%q): no error", bad)
				}
			}
		})
	}
}

func list(t *testing.T, s Store, prefix string) string {
	t.Helper()
	infos, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range infos {
		names = append(names, i.Name)
	}
	return strings.Join(names, " ")
}

// TestS3BadInput: a wrong bucket, wrong credentials and a bad endpoint
// each give one line naming what is wrong.
func TestS3BadInput(t *testing.T) {
	cfg, bucket := s3Env(t)
	ctx := context.Background()
	_, err := NewS3(ctx, cfg, bucket+"-missing", "")
	if err == nil || !strings.Contains(err.Error(), "no such bucket") || !strings.Contains(err.Error(), bucket+"-missing") {
		t.Errorf("wrong bucket: %v", err)
	}
	bad := cfg
	bad.SecretKey = "wrong"
	_, err = NewS3(ctx, bad, bucket, "")
	// AWS says SignatureDoesNotMatch, SeaweedFS AccessDenied.
	if err == nil || !strings.Contains(err.Error(), "credentials refused") && !strings.Contains(err.Error(), "check AWS_SECRET_ACCESS_KEY") {
		t.Errorf("wrong secret: %v", err)
	}
	bad = cfg
	bad.AccessKey = "nobody"
	_, err = NewS3(ctx, bad, bucket, "")
	if err == nil || !strings.Contains(err.Error(), "credentials refused") && !strings.Contains(err.Error(), "access denied") {
		t.Errorf("unknown access key: %v", err)
	}
}

func TestOpenLocation(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		loc  string
		env  map[string]string
		want string // error substring, "" for none
	}{
		{"s3://", nil, "no bucket"},
		{"s3://b/p", map[string]string{"AWS_ENDPOINT_URL": "ftp://x"}, "AWS_ENDPOINT_URL \"ftp://x\""},
		{"s3://b/p", map[string]string{"AWS_ACCESS_KEY_ID": "k"}, "set both or neither"},
		{"", nil, "empty location"},
		{"s3://b/p?region=x", nil, "nothing after the prefix"},
		{"s3://u:pw@b/p", nil, "nothing after the prefix"},
	} {
		_, err := Open(context.Background(), c.loc, env(c.env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q, %v) = %v, want %q", c.loc, c.env, err, c.want)
		}
	}
	for _, loc := range []string{"s3://b", "s3://b/", "/tmp/x", "s3:///x"} {
		if err := WriteObject(context.Background(), loc, nil, env(nil)); err == nil {
			t.Errorf("WriteObject(%q): no error", loc)
		}
	}
	s, err := Open(context.Background(), "file://"+t.TempDir(), env(nil))
	if _, ok := s.(*Local); err != nil || !ok {
		t.Errorf("file URL: %T, %v", s, err)
	}
	cfg, err := S3ConfigFromEnv(env(map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:8333", "AWS_DEFAULT_REGION": "eu-west-1"}))
	if err != nil || cfg.Endpoint != "127.0.0.1:8333" || cfg.Secure || cfg.Region != "eu-west-1" {
		t.Errorf("config = %+v, %v", cfg, err)
	}
}
