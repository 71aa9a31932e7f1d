"""The floor: errors, words, settings, numbers and the slice catalog; imports no other layer."""
