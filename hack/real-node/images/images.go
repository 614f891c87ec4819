// Package images builds the real node's container images from static
// binaries, without a registry or a Docker engine: a staged root file
// system becomes one layer, and go-containerregistry makes the image and
// writes it as a tarball that containerd's `ctr images import` loads.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Spec is one image.
type Spec struct {
	// Ref names the image as pods will, e.g.
	// "ghcr.io/slingshot-k8s/slingshot-agent:e2e".
	Ref string
	// Files maps a path in the image to the host file copied there, with
	// its mode.
	Files map[string]string
	// Entrypoint and User of the image's config; User "" is root.
	Entrypoint []string
	User       string
}

// Build writes spec's image as a tarball (the `docker save` format, which
// `ctr images import` reads) to out.
func Build(spec Spec, out string) error {
	ref, err := name.ParseReference(spec.Ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image %q: %w", spec.Ref, err)
	}
	stage, err := os.MkdirTemp(filepath.Dir(out), "stage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	for dst, src := range spec.Files {
		if err := copyFile(src, filepath.Join(stage, filepath.FromSlash(strings.TrimPrefix(dst, "/")))); err != nil {
			return fmt.Errorf("image %s: %w", spec.Ref, err)
		}
	}
	// /tmp exists in every image, as programs expect.
	if err := os.MkdirAll(filepath.Join(stage, "tmp"), 0o1777); err != nil {
		return err
	}
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := tw.AddFS(os.DirFS(stage)); err != nil {
		return fmt.Errorf("image %s: layer: %w", spec.Ref, err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	})
	if err != nil {
		return err
	}
	base, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: "amd64", OS: "linux",
		Config: v1.Config{Entrypoint: spec.Entrypoint, User: spec.User, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(base, layer) // adds the layer's diff ID to the config
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, ref, img)
}

func copyFile(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, fi.Mode().Perm())
}

// BuildStatic builds Go packages of the module in dir as static binaries
// (CGO_ENABLED=0, -trimpath) into outDir.
func BuildStatic(ctx context.Context, dir, outDir string, pkgs ...string) error {
	return BuildStaticLD(ctx, dir, outDir, "", pkgs...)
}

// BuildStaticLD is BuildStatic with more linker flags, ldflags (e.g.
// "-X pkg.Var=value"), after -s -w.
func BuildStaticLD(ctx context.Context, dir, outDir, ldflags string, pkgs ...string) error {
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-trimpath", "-ldflags", strings.TrimSpace("-s -w " + ldflags), "-o", outDir + "/"}, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}
