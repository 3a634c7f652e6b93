"""Where class names and images come from: the packaged class lists (ImageNet-D, the 22 GenBench datasets),
Hugging Face datasets (``hf:<repo or path>[@rev]``), folders of class folders (``folder:<path>``) and
imported files. Builders and reports both read their classes and images here, so a report never imports a
builder."""
