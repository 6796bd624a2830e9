#include "runtime/bench/bench_prompts.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/base/json_number.h"

namespace verdict {

using json = nlohmann::json;

json BenchPrompt::ToJson() const {
  if (!token_ids.empty()) return json(token_ids);
  return json(text);
}

const std::vector<BenchPrompt>& BuiltinPrompts() {
  // Openings of chapters and books the bundled models were trained on, so
  // the draft has text it can predict; ASCII only, so the file's encoding
  // never matters.
  static const std::vector<BenchPrompt>* const prompts = new std::vector<BenchPrompt>{
      {"It is a truth universally acknowledged, that a single man in possession of a good "
       "fortune, must be in want of a wife."},
      {"Mr. Bennet was among the earliest of those who waited on Mr. Bingley. He had always "
       "intended to visit him, though to the last always assuring his wife that he should not "
       "go;"},
      {"Not all that Mrs. Bennet, however, with the assistance of her five daughters, could ask "
       "on the subject, was sufficient to draw from her husband any satisfactory description of "
       "Mr. Bingley."},
      {"The family of Dashwood had long been settled in Sussex. Their estate was large, and their "
       "residence was at Norland Park, in the centre of their property,"},
      {"Mrs. John Dashwood now installed herself mistress of Norland; and her mother and "
       "sisters-in-law were degraded to the condition of visitors."},
      {"Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy "
       "disposition, seemed to unite some of the best blessings of existence;"},
      {"About thirty years ago Miss Maria Ward, of Huntingdon, with only seven thousand pounds, "
       "had the good luck to captivate Sir Thomas Bertram, of Mansfield Park,"},
      {"No one who had ever seen Catherine Morland in her infancy would have supposed her born to "
       "be an heroine."},
      {"Sir Walter Elliot, of Kellynch Hall, in Somersetshire, was a man who, for his own "
       "amusement, never took up any book but the Baronetage;"},
      {"Call me Ishmael. Some years ago -- never mind how long precisely -- having little or no "
       "money in my purse, and nothing particular to interest me on shore, I thought I would sail "
       "about a little and see the watery part of the world."},
      {"There now is your insular city of the Manhattoes, belted round by wharves as Indian isles "
       "by coral reefs -- commerce surrounds it with her surf."},
      {"I stuffed a shirt or two into my old carpet-bag, tucked it under my arm, and started for "
       "Cape Horn and the Pacific."},
      {"Entering that gable-ended Spouter-Inn, you found yourself in a wide, low, straggling "
       "entry with old-fashioned wainscots,"},
      {"My father's family name being Pirrip, and my Christian name Philip, my infant tongue could "
       "make of both names nothing longer or more explicit than Pip."},
      {"Ours was the marsh country, down by the river, within, as the river wound, twenty miles "
       "of the sea."},
      {"My sister, Mrs. Joe Gargery, was more than twenty years older than I, and had established "
       "a great reputation with herself and the neighbors because she had brought me up by hand."},
      {"No one would have believed in the last years of the nineteenth century that this world "
       "was being watched keenly and closely by intelligences greater than man's"},
      {"Then came the night of the first falling star. It was seen early in the morning, rushing "
       "over Winchester eastward, a line of flame high in the atmosphere."},
      {"The year 1866 was signalised by a remarkable incident, a mysterious and puzzling "
       "phenomenon, which doubtless no one has yet forgotten."},
      {"For some time past vessels had been met by an enormous thing, a long object, "
       "spindle-shaped, occasionally phosphorescent,"},
      {"In the beginning God created the heaven and the earth.\nAnd the earth was without form, "
       "and void; and darkness was upon the face of the deep."},
      {"The LORD is my shepherd; I shall not want.\nHe maketh me to lie down in green pastures: "
       "he leadeth me beside the still waters."},
      {"In the beginning was the Word, and the Word was with God, and the Word was God."},
      {"Vanity of vanities, saith the Preacher, vanity of vanities; all is vanity.\nWhat profit "
       "hath a man of all his labour which he taketh under the sun?"},
      {"To every thing there is a season, and a time to every purpose under the heaven:\nA time "
       "to be born, and a time to die;"},
      {"Blessed are the poor in spirit: for theirs is the kingdom of heaven.\nBlessed are they "
       "that mourn: for they shall be comforted."},
      {"Though I speak with the tongues of men and of angels, and have not charity, I am become "
       "as sounding brass, or a tinkling cymbal."},
      {"And Ruth said, Intreat me not to leave thee, or to return from following after thee: for "
       "whither thou goest, I will go;"},
      {"The fear of the LORD is the beginning of knowledge: but fools despise wisdom and "
       "instruction."},
      {"Comfort ye, comfort ye my people, saith your God."},
      {"And it came to pass in those days, that there went out a decree from Caesar Augustus, "
       "that all the world should be taxed."},
      {"And God said, Let there be light: and there was light.\nAnd God saw the light, that it "
       "was good:"},
  };
  return *prompts;
}

absl::StatusOr<std::vector<BenchPrompt>> ParsePromptsJsonl(absl::string_view text) {
  std::vector<BenchPrompt> prompts;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("prompts line ", line_number, ": ", why));
    };
    const json doc = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return bad("not valid JSON");
    if (!doc.is_object()) return bad("not a JSON object");
    auto it = doc.find("prompt");
    if (it == doc.end()) return bad("no \"prompt\" field");
    BenchPrompt prompt;
    if (it->is_string()) {
      prompt.text = it->get<std::string>();
      if (prompt.text.empty()) return bad("the prompt is empty");
    } else if (it->is_array()) {
      if (it->empty()) return bad("the prompt is empty");
      for (size_t j = 0; j < it->size(); ++j) {
        absl::StatusOr<int32_t> id =
            JsonIntegerAs<int32_t>((*it)[j], absl::StrCat("prompt[", j, "]"), 0);
        if (!id.ok()) {
          return bad(absl::StrCat("a token id list holds something that is not a token id: ",
                                  id.status().message()));
        }
        prompt.token_ids.push_back(*id);
      }
    } else {
      return bad("\"prompt\" is neither a string nor a list of token ids");
    }
    prompts.push_back(std::move(prompt));
  }
  if (prompts.empty()) return absl::InvalidArgumentError("the prompts file holds no prompt");
  return prompts;
}

absl::StatusOr<std::vector<BenchPrompt>> LoadPrompts(const std::string& source) {
  if (source == "builtin") return BuiltinPrompts();
  std::ifstream in(source, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open the prompts file ", source));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::vector<BenchPrompt>> prompts = ParsePromptsJsonl(text.str());
  if (!prompts.ok()) {
    return absl::Status(prompts.status().code(),
                        absl::StrCat(source, ": ", prompts.status().message()));
  }
  return prompts;
}

}  // namespace verdict
