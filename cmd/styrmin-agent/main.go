// Command styrmin-agent is the in-cluster operator of Styrmin. It only parses
// flags and wires the operator package.
package main

func main() {}
