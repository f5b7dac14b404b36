package framework

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Shipped names exactly the plugins the repository builds (every plugins/<name> with a
// main.go, as the Makefile finds them).
func TestShippedIsWhatIsBuilt(t *testing.T) {
	mains, err := filepath.Glob(filepath.Join("..", "..", "plugins", "*", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	var built []string
	for _, m := range mains {
		if _, err := os.Stat(m); err == nil {
			built = append(built, filepath.Base(filepath.Dir(m)))
		}
	}
	slices.Sort(built)
	if !slices.Equal(built, Shipped) {
		t.Errorf("plugins/ builds %v, framework.Shipped says %v", built, Shipped)
	}
}
