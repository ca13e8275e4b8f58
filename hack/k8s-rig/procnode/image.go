package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// imageEntry maps an image reference to a local binary.
type imageEntry struct {
	key    string // as given: "elasticdl:latest", "elasticdl", "reg.io/team/elasticdl:v1"
	repo   string // key without tag/digest
	tag    string // "" = any tag
	binary string // absolute path
}

type imageMap []imageEntry

func (m imageMap) String() string {
	var s []string
	for _, e := range m {
		s = append(s, e.key+"="+e.binary)
	}
	return strings.Join(s, ",")
}

// splitRef splits an image reference into repository and tag; a digest
// (@sha256:...) is dropped.
func splitRef(ref string) (repo, tag string) {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	// A ':' after the last '/' is a tag separator; before it, a registry port.
	slash := strings.LastIndex(ref, "/")
	if i := strings.LastIndex(ref, ":"); i > slash {
		return ref[:i], ref[i+1:]
	}
	return ref, ""
}

func parseImageMap(specs []string) (imageMap, error) {
	var m imageMap
	for _, s := range specs {
		k, bin, ok := strings.Cut(s, "=")
		if !ok || k == "" || bin == "" {
			return nil, fmt.Errorf("--image-map %q: want IMAGE=PATH", s)
		}
		abs, err := filepath.Abs(bin)
		if err != nil {
			return nil, err
		}
		if st, err := os.Stat(abs); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("--image-map %q: %s is not an executable file", s, abs)
		}
		repo, tag := splitRef(k)
		m = append(m, imageEntry{key: k, repo: repo, tag: tag, binary: abs})
	}
	return m, nil
}

// lookupImage finds the entry for a container image. An entry matches when
// its repository equals the image's repository, or the image's repository
// ends in "/"+entry repository (so "elasticdl" matches
// "registry.example.com/team/elasticdl"), and its tag is empty or equal to
// the image's tag (an image without a tag has tag "latest"). Earlier entries
// win.
func (m imageMap) lookupImage(image string) (imageEntry, bool) {
	repo, tag := splitRef(image)
	if tag == "" {
		tag = "latest"
	}
	for _, e := range m {
		if e.repo != repo && !strings.HasSuffix(repo, "/"+e.repo) {
			continue
		}
		if e.tag == "" || e.tag == tag {
			return e, true
		}
	}
	return imageEntry{}, false
}

// lookupCommand finds an entry whose binary's base name, or whose image's
// last path component, equals the base name of cmd0.
func (m imageMap) lookupCommand(cmd0 string) (imageEntry, bool) {
	b := filepath.Base(cmd0)
	for _, e := range m {
		if filepath.Base(e.binary) == b || lastComponent(e.repo) == b {
			return e, true
		}
	}
	return imageEntry{}, false
}

func lastComponent(repo string) string {
	if i := strings.LastIndex(repo, "/"); i >= 0 {
		return repo[i+1:]
	}
	return repo
}

// resolveArgv turns a container's (already $(VAR)-expanded) command and args
// into the argv of a local process:
//
//  1. The image is looked up in the map (lookupImage). If found, with binary B:
//     no command: argv = [B] + args (B stands for the image's entrypoint);
//     command[0] with the base name of B or of the image (e.g. "/elasticdl",
//     "elasticdl", "/usr/local/bin/elasticdl"): command[0] is replaced by B;
//     any other command (e.g. "sh -c ...") runs as written.
//  2. If the image is not mapped: no command is an error (the entrypoint is
//     unknown); a command[0] whose base name is that of a mapped binary or
//     image is replaced by that binary; anything else runs as written.
//
// "As written" means a command[0] without '/' is looked up in procnode's PATH,
// one with '/' is used as is.
func (m imageMap) resolveArgv(c *corev1.Container, command, args []string) ([]string, error) {
	if e, ok := m.lookupImage(c.Image); ok {
		if len(command) == 0 {
			return append([]string{e.binary}, args...), nil
		}
		b := filepath.Base(command[0])
		if b == filepath.Base(e.binary) || b == lastComponent(e.repo) {
			return append(append([]string{e.binary}, command[1:]...), args...), nil
		}
		return append(append([]string{}, command...), args...), nil
	}
	if len(command) == 0 {
		return nil, fmt.Errorf("image %q is not in --image-map and the container has no command", c.Image)
	}
	if e, ok := m.lookupCommand(command[0]); ok {
		return append(append([]string{e.binary}, command[1:]...), args...), nil
	}
	return append(append([]string{}, command...), args...), nil
}
