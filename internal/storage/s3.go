package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config is how to reach S3-compatible object storage. The standard
// AWS environment variables set it (S3ConfigFromEnv), so the same job
// runs against AWS, MinIO, SeaweedFS or Ceph RGW.
type S3Config struct {
	Endpoint     string // host:port
	Secure       bool   // https
	Region       string
	AccessKey    string
	SecretKey    string
	SessionToken string
}

// S3ConfigFromEnv reads AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (default
// https://s3.amazonaws.com), AWS_REGION or AWS_DEFAULT_REGION,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
func S3ConfigFromEnv(env func(string) string) (S3Config, error) {
	endpoint := cmpOr(env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL"), "https://s3.amazonaws.com")
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return S3Config{}, fmt.Errorf("AWS_ENDPOINT_URL %q: want http(s)://host[:port]", endpoint)
	}
	c := S3Config{
		Endpoint: u.Host, Secure: u.Scheme == "https",
		Region:    cmpOr(env("AWS_REGION"), env("AWS_DEFAULT_REGION"), "us-east-1"),
		AccessKey: env("AWS_ACCESS_KEY_ID"), SecretKey: env("AWS_SECRET_ACCESS_KEY"), SessionToken: env("AWS_SESSION_TOKEN"),
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return S3Config{}, errors.New("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set both or neither")
	}
	return c, nil
}

func cmpOr(xs ...string) string {
	for _, x := range xs {
		if x != "" {
			return x
		}
	}
	return ""
}

// partSize bounds a streamed upload's memory: minio-go buffers a part.
const partSize = 16 << 20

// S3 is a prefix of a bucket.
type S3 struct {
	c              *minio.Client
	cfg            S3Config
	bucket, prefix string
}

// NewS3 is the store at s3://bucket/prefix. It checks that the bucket
// exists and the credentials are good, so a wrong one fails at once with
// one clear error.
func NewS3(ctx context.Context, cfg S3Config, bucket, prefix string) (*S3, error) {
	creds := credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)
	c, err := minio.New(cfg.Endpoint, &minio.Options{Creds: creds, Secure: cfg.Secure, Region: cfg.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return nil, fmt.Errorf("storage: s3 client for %s: %w", cfg.Endpoint, err)
	}
	s := &S3{c: c, cfg: cfg, bucket: bucket, prefix: strings.Trim(prefix, "/")}
	ok, err := c.BucketExists(ctx, bucket)
	if err != nil {
		return nil, s.explain("s3://"+bucket, err)
	}
	if !ok {
		return nil, fmt.Errorf("s3://%s: no such bucket at %s", bucket, cfg.Endpoint)
	}
	return s, nil
}

func (s *S3) key(name string) (string, error) {
	n, err := cleanName(name)
	if err != nil {
		return "", err
	}
	if s.prefix == "" {
		return n, nil
	}
	return s.prefix + "/" + n, nil
}

// URL is s3://bucket/prefix/name.
func (s *S3) URL(name string) string {
	if s.prefix == "" {
		return "s3://" + s.bucket + "/" + name
	}
	return "s3://" + s.bucket + "/" + s.prefix + "/" + name
}

// explain turns an S3 error into one line that names the object and
// what to check.
func (s *S3) explain(what string, err error) error {
	r := minio.ToErrorResponse(err)
	switch {
	case r.Code == "NoSuchKey" || r.StatusCode == http.StatusNotFound && r.Code != "NoSuchBucket":
		return fmt.Errorf("%s: %w", what, ErrNotExist)
	case r.Code == "NoSuchBucket":
		return fmt.Errorf("%s: no such bucket %q at %s", what, s.bucket, s.cfg.Endpoint)
	case r.Code == "InvalidAccessKeyId" || r.Code == "SignatureDoesNotMatch":
		return fmt.Errorf("%s: credentials refused by %s (%s): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", what, s.cfg.Endpoint, r.Code)
	case r.Code == "AccessDenied" || r.StatusCode == http.StatusForbidden:
		if s.cfg.AccessKey == "" {
			return fmt.Errorf("%s: access denied by %s, and no credentials are set (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)", what, s.cfg.Endpoint)
		}
		return fmt.Errorf("%s: access denied by %s for key %s: check AWS_SECRET_ACCESS_KEY and the key's rights on the bucket", what, s.cfg.Endpoint, s.cfg.AccessKey)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Create streams the object up in parts; it appears when Close returns.
func (s *S3) Create(ctx context.Context, name string) (Writer, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	w := &s3Writer{pw: pw, done: make(chan error, 1), name: s.URL(name)}
	ctx, w.cancel = context.WithCancel(ctx)
	go func() {
		_, err := s.c.PutObject(ctx, s.bucket, key, pr, -1, minio.PutObjectOptions{PartSize: partSize})
		pr.CloseWithError(err) // unblock a writer if the upload failed first
		if err != nil {
			err = s.explain(w.name, err)
		}
		w.done <- err
	}()
	return w, nil
}

type s3Writer struct {
	pw     *io.PipeWriter
	done   chan error
	cancel context.CancelFunc
	name   string
}

func (w *s3Writer) Write(b []byte) (int, error) { return w.pw.Write(b) }

// Abort fails the upload: S3 never shows an object that was not
// completed (minio-go aborts the multipart upload).
func (w *s3Writer) Abort() {
	w.pw.CloseWithError(errors.New("aborted"))
	w.cancel()
	<-w.done
}

func (w *s3Writer) Close() error {
	w.pw.Close()
	err := <-w.done
	w.cancel()
	return err
}

// Open stats the object; reads are ranged GETs of exactly what is asked.
func (s *S3) Open(ctx context.Context, name string) (Reader, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, err
	}
	st, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return nil, s.explain(s.URL(name), err)
	}
	return &s3Reader{s: s, ctx: ctx, key: key, name: s.URL(name), size: st.Size}, nil
}

type s3Reader struct {
	s    *S3
	ctx  context.Context
	key  string
	name string
	size int64
}

func (r *s3Reader) Size() int64  { return r.size }
func (r *s3Reader) Name() string { return r.name }
func (r *s3Reader) Close() error { return nil }

// ReadAt is one GET of bytes [off, off+len(b)) (less at the end).
func (r *s3Reader) ReadAt(b []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(b)), r.size)
	if end == off {
		return 0, nil
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, end-1); err != nil {
		return 0, err
	}
	obj, err := r.s.c.GetObject(r.ctx, r.s.bucket, r.key, opts)
	if err != nil {
		return 0, r.s.explain(r.name, err)
	}
	defer obj.Close()
	n, err := io.ReadFull(obj, b[:end-off])
	if err != nil {
		return n, r.s.explain(fmt.Sprintf("%s bytes [%d, %d)", r.name, off, end), err)
	}
	if end-off < int64(len(b)) {
		return n, io.EOF
	}
	return n, nil
}

// Stat describes one object.
func (s *S3) Stat(ctx context.Context, name string) (Info, error) {
	key, err := s.key(name)
	if err != nil {
		return Info{}, err
	}
	st, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.explain(s.URL(name), err)
	}
	return Info{Name: name, Size: st.Size, ModTime: st.LastModified}, nil
}

// List lists the objects under prefix, all levels.
func (s *S3) List(ctx context.Context, prefix string) ([]Info, error) {
	full := prefix
	if s.prefix != "" {
		full = s.prefix + "/" + prefix
	}
	var out []Info
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: full, Recursive: true}) {
		if o.Err != nil {
			return nil, s.explain(s.URL(prefix), o.Err)
		}
		name := o.Key
		if s.prefix != "" {
			name = strings.TrimPrefix(name, s.prefix+"/")
		}
		out = append(out, Info{Name: name, Size: o.Size, ModTime: o.LastModified})
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Delete removes an object; a missing one is not an error.
func (s *S3) Delete(ctx context.Context, name string) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		if errors.Is(s.explain("", err), ErrNotExist) {
			return nil
		}
		return s.explain(s.URL(name), err)
	}
	return nil
}
