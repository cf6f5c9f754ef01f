package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/resolver"
)

// identityFlags say who the commits of lock, retry and upgrade are by
// and whether they are signed: --author, then $GIT_AUTHOR_NAME and
// $GIT_AUTHOR_EMAIL, then git config (the repository's, then the
// global), as git does (gitsource.Repo.Identity).
type identityFlags struct {
	author     string
	sign       bool
	signingKey string
	getenv     func(string) string
	cmd        *cobra.Command
}

func (f *identityFlags) register(cmd *cobra.Command, getenv func(string) string) {
	f.getenv, f.cmd = getenv, cmd
	fl := cmd.Flags()
	fl.StringVar(&f.author, "author", "", `author and committer of the commits, "Name <email>" (default: $GIT_AUTHOR_NAME and $GIT_AUTHOR_EMAIL, else git config user.name and user.email)`)
	fl.BoolVar(&f.sign, "sign", false, "sign the commits with an SSH key (default: git config commit.gpgsign; the key is --signing-key or user.signingkey)")
	fl.StringVar(&f.signingKey, "signing-key", "", "SSH private key file (or its .pub next to it) to sign with (default: git config user.signingkey, with gpg.format ssh)")
}

// commitOptions sets the author and signer of commits on repo in co.
func (f *identityFlags) commitOptions(repo *gitsource.Repo, co resolver.CommitOptions) (resolver.CommitOptions, error) {
	o := gitsource.IdentityOptions{Author: f.author, Getenv: f.getenv, SigningKey: f.signingKey}
	if f.cmd.Flags().Changed("sign") {
		o.Sign = &f.sign
	} else if f.signingKey != "" {
		yes := true
		o.Sign = &yes
	}
	id, err := repo.Identity(o)
	if errors.Is(err, gitsource.ErrSigning) && o.Sign == nil {
		return co, fmt.Errorf("%w (git config asks for signed commits; --sign=false commits unsigned)", err)
	}
	if err != nil {
		return co, err
	}
	co.Author, co.Sign = id.Author, id.Sign
	return co, nil
}
