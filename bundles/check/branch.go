package check

import (
	"fmt"
	"slices"
	"strings"
)

// compareBranch: a Go branch skips the tasks it declares downstream and
// did not choose, following a join when it chooses a task the join is
// downstream of (Airflow's rule); both must be the Dag's.
func (s *stubTask) compareBranch(td TaskDescription) {
	if len(td.Branch) == 0 {
		return
	}
	want, ours := sortedCopy(s.a.Downstream), sortedCopy(td.Branch)
	var problems []string
	for _, id := range want {
		if !slices.Contains(ours, id) {
			problems = append(problems, fmt.Sprintf("%s is directly downstream of the stub but not in the Go task's branch, so it is never skipped, whatever the branch chooses", id))
		}
	}
	for _, id := range ours {
		if !slices.Contains(want, id) {
			problems = append(problems, fmt.Sprintf("%s is in the Go task's branch but not directly downstream of the stub in the Dag", id))
		}
	}
	for _, id := range want {
		after, declared := sortedCopy(s.a.Joins[id]), sortedCopy(td.BranchJoins[id])
		switch {
		case slices.Equal(after, declared):
		case len(after) == 0:
			problems = append(problems, fmt.Sprintf("the Go side declares %s a join after [%s], but in the Dag it is downstream of none of them", id, strings.Join(declared, ", ")))
		case len(declared) == 0:
			problems = append(problems, fmt.Sprintf("%s is also downstream of %s, so Airflow follows it when the branch chooses one of those, but the Go side declares no join for it and would skip it", id, strings.Join(after, ", ")))
		default:
			problems = append(problems, fmt.Sprintf("the Go side declares %s a join after [%s], but in the Dag it is downstream of [%s]", id, strings.Join(declared, ", "), strings.Join(after, ", ")))
		}
	}
	if len(problems) == 0 {
		return
	}
	s.add(BranchMismatch, "the Go task is a branch over other tasks than the Dag puts after the stub: "+strings.Join(problems, "; "), s.branchFix(want))
}

// branchFix is the exact declaration of the stub's branch shape.
func (s *stubTask) branchFix(down []string) string {
	yaml, goCode := "branch: "+yamlList(down), fmt.Sprintf("bundles.WithBranch(%s)", quoted(down))
	joins := sortedKeys(s.a.Joins)
	if len(joins) > 0 {
		parts := make([]string, len(joins))
		for i, j := range joins {
			parts[i] = j + ": " + yamlList(sortedCopy(s.a.Joins[j]))
			goCode += fmt.Sprintf(", bundles.WithBranchJoin(%q, %s)", j, quoted(sortedCopy(s.a.Joins[j])))
		}
		yaml += " and branch_joins: {" + strings.Join(parts, ", ") + "}"
	} else {
		yaml += " and no branch_joins"
	}
	return fmt.Sprintf("set %s under %s in the bundle config (Go: %s) and pack it again", yaml, s.where, goCode)
}
