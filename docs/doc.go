// Package docs holds kinesisgen's guides (the Markdown files beside this
// one). Its test type-checks every Go snippet in them and in the README, so
// a guide cannot drift from the API it describes.
package docs
