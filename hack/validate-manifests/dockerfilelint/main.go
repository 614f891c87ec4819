// Command dockerfilelint lints a Dockerfile offline with BuildKit's own
// Dockerfile checks (the rules of `docker build --check`: undefined
// variables and build args, casing, JSON-form commands, secrets in ARG or
// ENV, stage names, platform flags, ...), parsing and resolving every stage
// as a build would, with base images resolved to an empty configuration
// instead of a registry. It adds the project's rules:
//
//   - every build-context path a COPY or ADD names exists and is not
//     excluded by .dockerignore;
//   - each image target sets USER explicitly, and the controller's is not
//     root;
//   - every base image names a tag or digest;
//   - the Go build is static and reproducible: CGO_ENABLED=0 and -trimpath.
//
// Usage: go run ./dockerfilelint [-f ../../Dockerfile] [-ignore ../../.dockerignore]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/dockerignore"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	digest "github.com/opencontainers/go-digest"
)

func main() {
	fs := flag.NewFlagSet("dockerfilelint", flag.ExitOnError)
	path := fs.String("f", "../../Dockerfile", "the Dockerfile")
	ignore := fs.String("ignore", "../../.dockerignore", "the build context's .dockerignore (its directory is the context)")
	fs.Parse(os.Args[1:])
	problems, err := Lint(context.Background(), *path, *ignore)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dockerfilelint:", err)
		os.Exit(1)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "dockerfilelint: %d problems in %s\n", len(problems), *path)
		os.Exit(1)
	}
	fmt.Printf("%s: no problems (BuildKit checks and project rules)\n", *path)
}

// offlineResolver answers every base image with an empty linux/amd64
// configuration, so that the checks run without a registry.
type offlineResolver struct{}

func (offlineResolver) ResolveImageConfig(_ context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	cfg, err := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux", "config": map[string]any{}, "rootfs": map[string]any{"type": "layers"}})
	return ref, digest.FromBytes(cfg), cfg, err
}

// Lint returns the problems of the Dockerfile at path, one line each.
func Lint(ctx context.Context, path, ignorePath string) ([]string, error) {
	dt, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var problems []string
	src := llb.Local("dockerfile")
	smap := llb.NewSourceMap(&src, path, "Dockerfile", dt)
	if smap.Definition, err = src.Marshal(ctx); err != nil {
		return nil, err
	}
	res, err := dockerfile2llb.DockerfileLint(ctx, dt, dockerfile2llb.ConvertOpt{
		MetaResolver: offlineResolver{},
		SourceMap:    smap,
	})
	if err != nil {
		return nil, err
	}
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = int(w.Location.Ranges[0].Start.Line)
		}
		problems = append(problems, fmt.Sprintf("%s:%d: %s: %s (%s)", path, line, w.RuleName, w.Detail, w.URL))
	}
	if res.Error != nil {
		problems = append(problems, fmt.Sprintf("%s: build error: %s", path, res.Error.Message))
	}
	own, err := projectRules(path, dt, ignorePath)
	if err != nil {
		return nil, err
	}
	return append(problems, own...), nil
}

func projectRules(path string, dt []byte, ignorePath string) ([]string, error) {
	ast, err := parser.Parse(bytes.NewReader(dt))
	if err != nil {
		return nil, err
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		return nil, err
	}
	contextDir := filepath.Dir(ignorePath)
	var patterns []string
	if f, err := os.Open(ignorePath); err == nil {
		patterns, err = dockerignore.ReadAll(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ignorePath, err)
		}
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ignorePath, err)
	}
	var problems []string
	bad := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: project rule: %s", path, line, fmt.Sprintf(format, args...)))
	}
	names := map[string]bool{}
	for _, st := range stages {
		names[st.Name] = true
	}
	sawStatic := false
	for _, st := range stages {
		line := 0
		if len(st.Location) > 0 {
			line = st.Location[0].Start.Line
		}
		base := st.BaseName
		if !names[base] && !strings.Contains(base, "@sha256:") {
			if i := strings.LastIndex(base, ":"); i < 0 || strings.Contains(base[i:], "/") {
				bad(line, "base image %s names no tag or digest", base)
			}
		}
		user := ""
		for _, cmd := range st.Commands {
			switch c := cmd.(type) {
			case *instructions.UserCommand:
				user = c.User
			case *instructions.CopyCommand:
				if c.From == "" {
					problems = append(problems, checkSources(path, contextDir, pm, c.SourcePaths, locLine(c.Location()))...)
				}
			case *instructions.AddCommand:
				problems = append(problems, checkSources(path, contextDir, pm, c.SourcePaths, locLine(c.Location()))...)
			case *instructions.RunCommand:
				text := strings.Join(c.CmdLine, " ")
				if strings.Contains(text, "go build") {
					if !strings.Contains(text, "CGO_ENABLED=0") || !strings.Contains(text, "-trimpath") {
						bad(locLine(c.Location()), "go build without CGO_ENABLED=0 and -trimpath")
					}
					sawStatic = true
				}
			}
		}
		switch st.Name {
		case "agent", "controller":
			if user == "" {
				bad(line, "target %s sets no USER", st.Name)
			}
			if st.Name == "controller" && slices.Contains([]string{"0", "0:0", "root", "root:root"}, user) {
				bad(line, "the controller runs as root")
			}
		}
	}
	for _, target := range []string{"agent", "controller"} {
		if !names[target] {
			bad(0, "no %s target", target)
		}
	}
	if !sawStatic {
		bad(0, "no go build step")
	}
	return problems, nil
}

func locLine(loc []parser.Range) int {
	if len(loc) == 0 {
		return 0
	}
	return loc[0].Start.Line
}

// checkSources reports build-context sources that are missing or that
// .dockerignore excludes (the build would fail, or copy nothing).
func checkSources(path, contextDir string, pm *patternmatcher.PatternMatcher, srcs []string, line int) []string {
	var problems []string
	for _, src := range srcs {
		clean := filepath.Clean(strings.TrimPrefix(src, "/"))
		if clean == "." {
			continue
		}
		if _, err := os.Stat(filepath.Join(contextDir, clean)); err != nil {
			problems = append(problems, fmt.Sprintf("%s:%d: project rule: COPY source %s is not in the build context", path, line, src))
			continue
		}
		if ignored, _ := pm.MatchesOrParentMatches(filepath.ToSlash(clean)); ignored {
			problems = append(problems, fmt.Sprintf("%s:%d: project rule: COPY source %s is excluded by .dockerignore", path, line, src))
		}
	}
	return problems
}
