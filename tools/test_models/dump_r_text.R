# Writes the novels that three R packages hold as data into plain UTF-8
# files, one element of each character vector a line.
#   Rscript --vanilla dump_r_text.R SITE_LIBRARY OUT_DIR
args <- commandArgs(trailingOnly = TRUE)
lib <- args[1]
out <- args[2]

put <- function(x, name) {
  stopifnot(is.character(x), length(x) > 0)
  writeLines(enc2utf8(x), file.path(out, paste0(name, ".txt")), useBytes = TRUE)
}

austen <- new.env()
invisible(lazyLoad(file.path(lib, "janeaustenr", "data", "Rdata"), envir = austen))
for (n in c("sensesensibility", "prideprejudice", "mansfieldpark", "emma",
            "northangerabbey", "persuasion")) {
  put(get(n, envir = austen), n)
}

tok <- new.env()
invisible(lazyLoad(file.path(lib, "tokenizers", "data", "Rdata"), envir = tok))
put(tok$mobydick, "mobydick")

tidy <- new.env()
load(file.path(lib, "tidytext", "extdata", "books.rda"), envir = tidy)
books <- tidy$books
# Pride and Prejudice is there too; the Austen package already has it.
for (t in c("Great Expectations", "The War of the Worlds",
            "Twenty Thousand Leagues under the Sea")) {
  put(books$text[books$title == t], gsub("[^a-z]", "", tolower(t)))
}
