//go:build !linux

package bench

import "syscall"

func procAttr() *syscall.SysProcAttr { return nil }
