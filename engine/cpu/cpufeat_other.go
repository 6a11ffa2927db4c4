//go:build !amd64 || purego

package cpu

func kernDetect() kernLevel { return kernLevelGo }
