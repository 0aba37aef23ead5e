package p

// Hand-written, despite the name.
const Handwritten = true
