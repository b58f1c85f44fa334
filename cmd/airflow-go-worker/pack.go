package main

import (
	"errors"
	"io"
)

// STUB: replaced by the helper that owns AFBNDL01 packing.

func runPack(args []string, stdout, stderr io.Writer) error {
	return errors.New("pack: not implemented yet")
}
func runInspect(args []string, stdout, stderr io.Writer) error {
	return errors.New("inspect: not implemented yet")
}
