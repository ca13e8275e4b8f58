package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
)

// mountMap maps the mount paths of a container's Secret volumes to the
// directories under the pod dir that hold their files. A process cannot
// see /etc/... without a mount namespace (and root), so procnode rewrites
// the mount path where the pod names it: in args and env values.
type mountMap map[string]string

// secretVolumes writes the Secret volumes c mounts into dir/volumes/NAME,
// as a kubelet would (items, modes, optional), and returns where each
// mount path went. A missing Secret or key is a configError: the kubelet
// waits for it, and so does procnode (prepareRetrying).
func secretVolumes(pod *corev1.Pod, c *corev1.Container, dir string, secrets corev1listers.SecretLister) (mountMap, error) {
	vols := map[string]*corev1.SecretVolumeSource{}
	for i := range pod.Spec.Volumes {
		if s := pod.Spec.Volumes[i].Secret; s != nil {
			vols[pod.Spec.Volumes[i].Name] = s
		}
	}
	m := mountMap{}
	for _, vm := range c.VolumeMounts {
		src, ok := vols[vm.Name]
		if !ok || vm.MountPath == "" {
			continue
		}
		real := filepath.Join(dir, "volumes", vm.Name)
		if err := writeSecretVolume(pod.Namespace, src, real, secrets); err != nil {
			return nil, fmt.Errorf("volume %q: %w", vm.Name, err)
		}
		target := real
		if vm.SubPath != "" {
			target = filepath.Join(real, vm.SubPath)
		}
		m[filepath.Clean(vm.MountPath)] = target
	}
	return m, nil
}

// writeSecretVolume writes src's files into dir, replacing what an earlier
// start of the container left there.
func writeSecretVolume(ns string, src *corev1.SecretVolumeSource, dir string, secrets corev1listers.SecretLister) error {
	optional := src.Optional != nil && *src.Optional
	s, err := secrets.Secrets(ns).Get(src.SecretName)
	var data map[string][]byte
	switch {
	case err == nil:
		data = s.Data
	case optional:
	default:
		return configError{fmt.Errorf("secret %q not found", src.SecretName)}
	}
	mode := os.FileMode(0o644)
	if src.DefaultMode != nil {
		mode = os.FileMode(*src.DefaultMode) & 0o777
	}
	type file struct {
		path string
		mode os.FileMode
		data []byte
	}
	var files []file
	if len(src.Items) == 0 {
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			files = append(files, file{k, mode, data[k]})
		}
	}
	for _, it := range src.Items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return configError{fmt.Errorf("couldn't find key %s in Secret %s/%s", it.Key, ns, src.SecretName)}
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode) & 0o777
		}
		files = append(files, file{it.Path, m, v})
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(dir, f.path)
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			return fmt.Errorf("item path %q leaves the volume", f.path)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
		// WriteFile's mode is masked by the umask; the kubelet's is not.
		if err := os.Chmod(p, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// rewrite replaces a mount path that s starts with, or that follows the
// '=' of a --flag=PATH argument, by its directory under the pod dir.
func (m mountMap) rewrite(s string) string {
	if len(m) == 0 {
		return s
	}
	prefix, val := "", s
	if strings.HasPrefix(s, "-") {
		if i := strings.IndexByte(s, '='); i >= 0 {
			prefix, val = s[:i+1], s[i+1:]
		}
	}
	best := ""
	for from := range m {
		if (val == from || strings.HasPrefix(val, from+"/")) && len(from) > len(best) {
			best = from // the innermost mount wins, as in a mount table
		}
	}
	if best == "" {
		return s
	}
	return prefix + m[best] + val[len(best):]
}

// rewriteAll rewrites argv and the values of env (KEY=VALUE) in place.
func (m mountMap) rewriteAll(argv, env []string) {
	for i, a := range argv {
		argv[i] = m.rewrite(a)
	}
	for i, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[i] = k + "=" + m.rewrite(v)
		}
	}
}
