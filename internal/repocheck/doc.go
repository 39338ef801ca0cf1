// Package repocheck holds tests about the repository itself rather than
// about one package: dependencies pinned and verified, the docs' Go code
// compiling, their links resolving, and the Kubernetes manifests agreeing
// with the app. It has no code of its own.
package repocheck
