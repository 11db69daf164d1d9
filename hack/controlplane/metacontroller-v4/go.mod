module nodewarden.local/controlplane/metacontroller-v4

go 1.23

require metacontroller v0.0.0-00010101000000-000000000000

// Metacontroller's go.mod says `module metacontroller`, hence the replace.
//
// The module proxy serves this version on some days and refuses it (403) on
// others, so its requirements and go.sum are not committed while it cannot be
// downloaded: hack/controlplane/build.sh resolves them at build time in
// .bin/.metacontroller-v4/ and falls back to ../metacontroller (v1.5.20) when
// the download is refused or fails. Once it downloads, `make controlplane-tidy`
// writes the full requirements and go.sum here.
//
// The release this commit is tagged with (build.sh stamps it into the binary):
// metacontroller-release: v4.17.2
replace metacontroller => github.com/metacontroller/metacontroller v0.0.0-20260813213314-76b818bdc67b
