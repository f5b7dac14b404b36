// Package envexpand is Kubernetes' dependent environment variable expansion, the $(VAR)
// syntax the kubelet applies to a container's env values, command and args:
//
//   - $(NAME) is replaced by the value of NAME when NAME is defined (earlier in the env
//     list), and left as it is otherwise;
//   - $$ is an escaped $;
//   - a $ before anything else, and an unterminated $(, are kept as they are.
//
// The semantics are those of k8s.io/kubernetes/third_party/forked/golang/expansion, which
// the kubelet uses; that module is not a dependency of faultline, hence this small copy of
// the rules. It depends on nothing but the standard library: the barrier, a static binary
// in an image of its own, expands a spare's variables with it once the spare holds an index.
package envexpand

import "strings"

// Expand expands input. lookup returns the value of a defined variable.
func Expand(input string, lookup func(name string) (string, bool)) string {
	var b strings.Builder
	scan(input, func(literal string) { b.WriteString(literal) }, func(name string) {
		if v, ok := lookup(name); ok {
			b.WriteString(v)
			return
		}
		b.WriteString("$(" + name + ")")
	})
	return b.String()
}

// References returns the names input refers to with $(NAME), in order.
func References(input string) []string {
	var names []string
	scan(input, func(string) {}, func(name string) { names = append(names, name) })
	return names
}

// Env expands an ordered env list the way the kubelet does: each value may refer to the
// variables before it, and a later definition of a name replaces an earlier one.
func Env(env []Var) map[string]string {
	out := make(map[string]string, len(env))
	for _, e := range env {
		if e.Resolved {
			out[e.Name] = e.Value
			continue
		}
		out[e.Name] = Expand(e.Value, func(name string) (string, bool) {
			v, ok := out[name]
			return v, ok
		})
	}
	return out
}

// Var is one entry of an env list.
type Var struct {
	Name  string
	Value string
	// Resolved marks a value that is not expanded: one that came from a fieldRef (the
	// caller resolved it) rather than from a literal value.
	Resolved bool
}

// scan walks input, handing literal text to lit and each $(NAME) reference to ref.
func scan(input string, lit func(string), ref func(string)) {
	start := 0 // start of the pending literal text
	for i := 0; i < len(input); i++ {
		if input[i] != '$' || i+1 == len(input) {
			continue
		}
		lit(input[start:i])
		switch next := input[i+1]; next {
		case '$': // $$ is an escaped $
			lit("$")
			i++
		case '(':
			end := strings.IndexByte(input[i+2:], ')')
			if end < 0 { // unterminated: kept as it is
				lit("$(")
				i++
				break
			}
			ref(input[i+2 : i+2+end])
			i += 2 + end
		default: // $ before anything else is kept, with what follows
			lit(input[i : i+2])
			i++
		}
		start = i + 1
	}
	lit(input[start:])
}
